#include "learner/cpu_backend.hpp"

#include <cstring>
#include <mutex>

#include "base/check.hpp"
#include "base/large_buffer.hpp"
#include "learner/dataset.hpp"
#include "learner/layer_cpu.hpp"
#include "learner/optimizer.hpp"
#include "learner/parameter_store.hpp"

namespace gridtrain::learner {

std::unique_ptr<Layer> CpuBackend::make_layer(const LayerShape& layer, int max_batch) {
  return cpu::make_layer(layer, max_batch);
}

std::unique_ptr<Loss> CpuBackend::make_loss(int classes, int max_batch) { return cpu::make_loss(classes, max_batch); }

Buffer CpuBackend::allocate(std::size_t floats) {
  // A large buffer (huge pages from 2 MB: the step's passes over a big model's parameters and gradients), zeroed.
  float* data = LargeBufferAllocator<float>().allocate(floats);  // checks floats * sizeof(float) for overflow
  std::memset(data, 0, floats * sizeof(float));
  return Buffer(data, floats, [](float* p) { free_large(p); });
}

void CpuBackend::upload(std::span<const float> host, float* backend) {
  if (host.empty()) return;  // memcpy's pointers must be valid even for 0 bytes
  std::memcpy(backend, host.data(), host.size_bytes());
}

void CpuBackend::download(const float* backend, std::span<float> host) {
  if (host.empty()) return;
  std::memcpy(host.data(), backend, host.size_bytes());
}

void CpuBackend::attach(ParameterStore& store, const Model& model, Optimizer& optimizer, float* params,
                        const float* grads) {
  store_ = &store;
  optimizer_ = &optimizer;
  for (std::size_t t = 0; t <= model.tensors().size(); ++t) offsets_.push_back(model.tensor_offset(t));
  params_ = params;
  grads_ = grads;
}

void CpuBackend::prepare() {
  for (std::size_t t = store_->tensor_count(); t-- > 0;) {
    std::lock_guard<std::mutex> hold(store_->mutex(t));
    upload(store_->data(t), params_ + offsets_[t]);
  }
  ++transfers_.passes;
  transfers_.bytes += offsets_.back() * sizeof(float);
}

void CpuBackend::update(double learning_rate) {
  // The gradients are host memory: the optimizer reads them where they are.
  for (std::size_t t = store_->tensor_count(); t-- > 0;) {
    std::span<const float> grad(grads_ + offsets_[t], offsets_[t + 1] - offsets_[t]);
    std::lock_guard<std::mutex> hold(store_->mutex(t));
    optimizer_->apply(t, store_->data(t), grad, learning_rate);
  }
}

void CpuBackend::hold_training_set(std::span<const float> images, std::span<const std::int32_t> labels,
                                   std::size_t sample_floats) {
  GRIDTRAIN_REQUIRE(sample_floats > 0 && images.size() == labels.size() * sample_floats);
  images_ = images;
  labels_ = labels;
  sample_floats_ = sample_floats;
}

void CpuBackend::hold_order(std::span<const std::uint32_t> order) {
  GRIDTRAIN_REQUIRE(order.size() == labels_.size());
  order_.assign(order.begin(), order.end());
}

void CpuBackend::gather(std::size_t first, int batch, float* inputs, std::int32_t* labels) {
  GRIDTRAIN_REQUIRE(batch >= 0 && first + static_cast<std::size_t>(batch) <= order_.size());
  gather_samples(images_, labels_, sample_floats_, std::span(order_).subspan(first, static_cast<std::size_t>(batch)),
                 inputs, labels);
}

}  // namespace gridtrain::learner
