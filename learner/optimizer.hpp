#pragma once
// The local update rule of the learner: SGD or momentum SGD, with L2 weight decay and a learning-rate schedule
// over epochs (config::OptimizerConfig).
//
// Momentum is the worker rule of Async MEASGD (You, Buluç & Demmel, SC17, eqs. 5-6), which is Sutskever et
// al.'s momentum with the learning rate inside the velocity:
//     v <- μ·v - η·(g + λ·w)
//     w <- w + v
// The paper's elastic term, -ηρ·(w - w̃) in eq. 6, is not applied here: the allreduce's elastic update
// (allreduce/elastic_update.hpp) pulls w toward the line's mean between steps, on the same tensor locks.
// Plain SGD is the same rule without velocity: w <- w - η·(g + λ·w). Weight decay applies to every tensor,
// biases included (as torch.optim.SGD does).

#include <cstddef>
#include <span>
#include <vector>

#include "config/config.hpp"
#include "learner/model.hpp"

namespace gridtrain::learner {

class Optimizer {
 public:
  // `epochs` is the length of the run (learner.epochs), which the cosine schedule spans.
  Optimizer(const config::OptimizerConfig& config, int epochs, const Model& model);

  // The learning rate at `epoch` (fractional: 2.5 is halfway through the third epoch):
  //   constant: η0
  //   step:     η0 · γ^floor(epoch / step_every_epochs)
  //   cosine:   η0 · (1 + cos(π · min(epoch, epochs) / epochs)) / 2, from η0 down to 0 at the last epoch's end
  // times the factor of learner.optimizer.scale_with_nodes for a cluster of `nodes` (1, N or sqrt N), reached
  // linearly over warmup_epochs from 1.
  double learning_rate(double epoch, int nodes = 1) const;

  // Applies one step of the rule to tensor t: `param` its floats, `grad` its gradient.
  // REQUIRES: the caller holds the tensor's lock in the ParameterStore (param is the arena's); sizes match t's.
  void apply(std::size_t t, std::span<float> param, std::span<const float> grad, double learning_rate);

  // The velocity in the arena's layout (empty for sgd): what a checkpoint saves and restores.
  // REQUIRES: no step in flight (the learner's thread, between steps).
  std::span<float> state() { return velocity_; }
  std::span<const float> state() const { return velocity_; }

  const config::OptimizerConfig& config() const { return config_; }

 private:
  double schedule_rate(double epoch) const;  // the schedule alone, at learning_rate

  config::OptimizerConfig config_;
  int epochs_;
  std::vector<std::size_t> offsets_;  // tensor t's floats start at offsets_[t] in the arena
  std::vector<float> velocity_;
};

}  // namespace gridtrain::learner
