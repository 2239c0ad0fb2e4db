#pragma once
// LayerStack: a Model made runnable on one backend, for minibatches of up to max_batch samples. It owns every
// buffer a step needs (the input, each layer's output and its gradient, a working copy of the parameters, their
// gradients), all allocated once, in the backend's memory.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "learner/backend.hpp"
#include "learner/model.hpp"

namespace gridtrain::learner {

class LayerStack {
 public:
  // REQUIRES: max_batch >= 1; backend outlives the stack.
  LayerStack(const Model& model, Backend& backend, int max_batch);

  const Model& model() const { return model_; }
  Backend& backend() { return backend_; }
  int max_batch() const { return max_batch_; }

  // The parameters the layers read, in the arena's layout, in backend memory. The caller fills them before
  // forward() (Backend::upload, or the backend itself once attached to them); the stack never writes them.
  float* params() { return params_.data(); }
  // What backward() leaves: d(mean loss)/d(params), in the arena's layout, in backend memory.
  const float* grads() const { return grads_.data(); }

  // Runs every layer and the loss over `batch` samples. inputs: batch x Model::input_floats(), host memory.
  // REQUIRES: 1 <= batch <= max_batch(); labels.size() == batch, each in [0, classes).
  LossResult forward(int batch, std::span<const float> inputs, std::span<const std::int32_t> labels) {
    start_forward(batch, inputs, labels);
    return loss();
  }

  // forward() without waiting for the loss: a backend may still be computing it (Loss::score). A training step
  // queues backward() and the update before it asks loss().
  void start_forward(int batch, std::span<const float> inputs, std::span<const std::int32_t> labels);
  // start_forward() on a minibatch already in place in backend memory, at input() and labels(): where a gather
  // (Backend::gather) writes it.
  void start_forward_in_place(int batch);
  float* input() { return acts_.data(); }
  std::int32_t* labels() { return loss_->gathered_labels(); }

  // The last forward's loss, once computed. REQUIRES: start_forward() ran since the last loss().
  LossResult loss() { return loss_->result(); }
  // Every loss scored since the last call, summed (Loss::take_totals).
  LossTotals take_loss_totals() { return loss_->take_totals(); }

  // Fills grads() for the batch of the last forward().
  // REQUIRES: forward() or start_forward() ran since the last backward().
  void backward();

  // Layer i's output for the last forward(), backend memory (batch x output floats). Layer 0's input is
  // output(-1). For tests and diagnostics.
  const float* output(int i) const { return acts_.data() + act_offset_[i + 1]; }

 private:
  void run_layers(int batch);  // every layer's forward, from input() on; not the loss
  LayerParams params_of(const LayerShape& layer) const;
  LayerGrads grads_of(const LayerShape& layer);

  Model model_;
  Backend& backend_;
  int max_batch_;
  std::vector<std::unique_ptr<Layer>> layers_;  // null for flatten (a view) and the loss (loss_)
  std::unique_ptr<Loss> loss_;
  // act_offset_[i + 1]: layer i's output in acts_ (and its gradient, at the same offset, in dacts_);
  // act_offset_[0]: the input. A flatten's output is its input, at the same offset.
  std::vector<std::size_t> act_offset_;
  std::vector<bool> needs_dx_;  // some layer before this one has parameters
  Buffer acts_, dacts_, params_, grads_;
  std::vector<std::int32_t> labels_;
  const std::int32_t* forward_labels_ = nullptr;  // the last forward's, for backward(): labels_ or the loss's own
  int batch_ = 0;  // of the last forward(); 0 after backward()
};

}  // namespace gridtrain::learner
