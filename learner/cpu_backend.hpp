#pragma once
// CpuBackend: the learner's backend on the host. Its layers are learner/layer_cpu.hpp's; its memory is host
// memory; the working copy of the parameters is a snapshot of the ParameterStore taken before each pass, and
// the optimizer updates the store itself (learner/backend.hpp).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "learner/backend.hpp"

namespace gridtrain::learner {

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  std::unique_ptr<Layer> make_layer(const LayerShape& layer, int max_batch) override;
  std::unique_ptr<Loss> make_loss(int classes, int max_batch) override;
  Buffer allocate(std::size_t floats) override;
  void upload(std::span<const float> host, float* backend) override;
  void download(const float* backend, std::span<float> host) override;

  void attach(ParameterStore& store, const Model& model, Optimizer& optimizer, float* params,
              const float* grads) override;
  void prepare() override;
  void update(double learning_rate) override;
  void flush() override {}
  void hand_to_host() override {}
  StoreTransfers store_transfers() const override { return transfers_; }

  // The set stays where the Learner has it: a view, and the gather a host copy (learner/data_placement.hpp).
  std::optional<std::size_t> free_bytes() override { return std::nullopt; }
  void hold_training_set(std::span<const float> images, std::span<const std::int32_t> labels,
                         std::size_t sample_floats) override;
  void hold_order(std::span<const std::uint32_t> order) override;
  void gather(std::size_t first, int batch, float* inputs, std::int32_t* labels) override;
  void run_step(int, std::size_t, double, const std::function<void()>& work) override { work(); }

 private:
  // Set by attach().
  ParameterStore* store_ = nullptr;
  Optimizer* optimizer_ = nullptr;
  std::vector<std::size_t> offsets_;  // tensor t is [offsets_[t], offsets_[t + 1]) of the arena
  float* params_ = nullptr;
  const float* grads_ = nullptr;
  StoreTransfers transfers_;

  // Set by hold_training_set() and hold_order().
  std::span<const float> images_;
  std::span<const std::int32_t> labels_;
  std::size_t sample_floats_ = 0;
  std::vector<std::uint32_t> order_;
};

}  // namespace gridtrain::learner
