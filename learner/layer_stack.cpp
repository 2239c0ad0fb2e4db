#include "learner/layer_stack.hpp"

#include <algorithm>

#include "base/check.hpp"

namespace gridtrain::learner {

using config::LayerType;

LayerStack::LayerStack(const Model& model, Backend& backend, int max_batch)
    : model_(model), backend_(backend), max_batch_(max_batch), labels_(static_cast<std::size_t>(max_batch)) {
  GRIDTRAIN_REQUIRE(max_batch >= 1);
  const auto& shapes = model_.layers();
  const std::size_t batch = static_cast<std::size_t>(max_batch);
  std::size_t floats = model_.input_floats() * batch;
  act_offset_.push_back(0);
  bool params_before = false;
  for (const LayerShape& layer : shapes) {
    const LayerType type = layer.spec.type;
    needs_dx_.push_back(params_before);
    params_before = params_before || layer.tensor_count > 0;
    if (type == LayerType::flatten || type == LayerType::softmax_cross_entropy) {
      layers_.push_back(nullptr);
      act_offset_.push_back(act_offset_.back());  // a view of its input; the loss's output is unused
      continue;
    }
    layers_.push_back(backend_.make_layer(layer, max_batch));
    act_offset_.push_back(floats);
    floats += layer.output_floats() * batch;
  }
  loss_ = backend_.make_loss(model_.classes(), max_batch);
  acts_ = backend_.allocate(floats);
  dacts_ = backend_.allocate(floats);
  params_ = backend_.allocate(model_.parameter_count());
  grads_ = backend_.allocate(model_.parameter_count());
}

LayerParams LayerStack::params_of(const LayerShape& layer) const {
  if (layer.tensor_count == 0) return {};
  const float* base = params_.data();
  return {base + model_.tensor_offset(layer.first_tensor), base + model_.tensor_offset(layer.first_tensor + 1)};
}

LayerGrads LayerStack::grads_of(const LayerShape& layer) {
  if (layer.tensor_count == 0) return {};
  float* base = grads_.data();
  return {base + model_.tensor_offset(layer.first_tensor), base + model_.tensor_offset(layer.first_tensor + 1)};
}

void LayerStack::start_forward(int batch, std::span<const float> inputs, std::span<const std::int32_t> labels) {
  GRIDTRAIN_REQUIRE(batch >= 1 && batch <= max_batch_);
  GRIDTRAIN_REQUIRE(inputs.size() == model_.input_floats() * static_cast<std::size_t>(batch));
  GRIDTRAIN_REQUIRE(labels.size() == static_cast<std::size_t>(batch));
  backend_.upload(inputs, acts_.data());
  run_layers(batch);
  std::copy(labels.begin(), labels.end(), labels_.begin());
  forward_labels_ = labels_.data();
  loss_->score(batch, acts_.data() + act_offset_[model_.layers().size() - 1], labels_.data());
}

void LayerStack::start_forward_in_place(int batch) {
  GRIDTRAIN_REQUIRE(batch >= 1 && batch <= max_batch_);
  run_layers(batch);
  forward_labels_ = loss_->gathered_labels();
  loss_->score_gathered(batch, acts_.data() + act_offset_[model_.layers().size() - 1]);
}

void LayerStack::run_layers(int batch) {
  const auto& shapes = model_.layers();
  const std::size_t last = shapes.size() - 1;  // the loss
  for (std::size_t i = 0; i < last; ++i) {
    if (!layers_[i]) continue;
    layers_[i]->forward(batch, acts_.data() + act_offset_[i], acts_.data() + act_offset_[i + 1], params_of(shapes[i]));
  }
  batch_ = batch;
}

void LayerStack::backward() {
  GRIDTRAIN_REQUIRE(batch_ >= 1);
  const auto& shapes = model_.layers();
  const std::size_t last = shapes.size() - 1;
  loss_->backward(batch_, forward_labels_, dacts_.data() + act_offset_[last]);
  for (std::size_t i = last; i-- > 0;) {
    if (!layers_[i]) continue;
    float* dx = needs_dx_[i] ? dacts_.data() + act_offset_[i] : nullptr;
    layers_[i]->backward(batch_, acts_.data() + act_offset_[i], acts_.data() + act_offset_[i + 1],
                         dacts_.data() + act_offset_[i + 1], dx, params_of(shapes[i]), grads_of(shapes[i]));
  }
  batch_ = 0;
}

}  // namespace gridtrain::learner
