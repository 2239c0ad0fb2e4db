#include "learner/optimizer.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numbers>

namespace gridtrain::learner {

Optimizer::Optimizer(const config::OptimizerConfig& config, int epochs, const Model& model)
    : config_(config), epochs_(std::max(epochs, 1)) {
  for (std::size_t t = 0; t <= model.tensors().size(); ++t) offsets_.push_back(model.tensor_offset(t));
  if (config_.kind == config::OptimizerKind::momentum) velocity_.assign(model.parameter_count(), 0.0f);
}

double Optimizer::learning_rate(double epoch) const {
  const double base = config_.learning_rate;
  switch (config_.schedule) {
    case config::Schedule::constant:
      return base;
    case config::Schedule::step: {
      const int every = std::max(config_.step_every_epochs, 1);
      return base * std::pow(config_.step_gamma, std::floor(std::max(epoch, 0.0) / every));
    }
    case config::Schedule::cosine: {
      const double progress = std::clamp(epoch / epochs_, 0.0, 1.0);
      return base * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
    }
  }
  return base;
}

void Optimizer::apply(std::size_t t, std::span<float> param, std::span<const float> grad, double learning_rate) {
  assert(param.size() == grad.size() && param.size() == offsets_[t + 1] - offsets_[t]);
  const std::size_t n = param.size();
  float* __restrict w = param.data();
  const float* __restrict g = grad.data();
  const float eta = static_cast<float>(learning_rate);
  const float decay = static_cast<float>(config_.weight_decay);
  if (velocity_.empty()) {
    for (std::size_t i = 0; i < n; ++i) w[i] -= eta * (g[i] + decay * w[i]);
    return;
  }
  float* __restrict v = velocity_.data() + offsets_[t];
  const float mu = static_cast<float>(config_.momentum);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = mu * v[i] - eta * (g[i] + decay * w[i]);
    w[i] += v[i];
  }
}

}  // namespace gridtrain::learner
