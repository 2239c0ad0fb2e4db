#include "learner/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/check.hpp"
#include "learner/layer_cpu_loop.hpp"

namespace gridtrain::learner {

namespace {

// Not inlined, with __restrict parameters: so they vectorize (learner/layer_cpu_loop.hpp).
[[gnu::noinline]] void sgd_step(std::size_t n, float* __restrict w, const float* __restrict g, float eta, float decay) {
  vector_loop(n, [=](std::size_t i) { w[i] -= eta * (g[i] + decay * w[i]); });
}

[[gnu::noinline]] void momentum_step(std::size_t n, float* __restrict w, const float* __restrict g, float* __restrict v,
                                     float mu, float eta, float decay) {
  vector_loop(n, [=](std::size_t i) {
    const float step = mu * v[i] - eta * (g[i] + decay * w[i]);
    v[i] = step;
    w[i] += step;
  });
}

}  // namespace

Optimizer::Optimizer(const config::OptimizerConfig& config, int epochs, const Model& model)
    : config_(config), epochs_(std::max(epochs, 1)) {
  for (std::size_t t = 0; t <= model.tensors().size(); ++t) offsets_.push_back(model.tensor_offset(t));
  if (config_.kind == config::OptimizerKind::momentum) velocity_.assign(model.parameter_count(), 0.0f);
}

double Optimizer::learning_rate(double epoch, int nodes) const {
  const double n = std::max(nodes, 1);
  double scale = 1;
  switch (config_.scale_with_nodes) {
    case config::NodeScaling::none:
      break;
    case config::NodeScaling::linear:
      scale = n;
      break;
    case config::NodeScaling::sqrt:
      scale = std::sqrt(n);
      break;
  }
  if (config_.warmup_epochs > 0) scale = 1 + (scale - 1) * std::clamp(epoch / config_.warmup_epochs, 0.0, 1.0);
  return scale * schedule_rate(epoch);
}

double Optimizer::schedule_rate(double epoch) const {
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
  GRIDTRAIN_REQUIRE(param.size() == grad.size() && param.size() == offsets_[t + 1] - offsets_[t]);
  const float eta = static_cast<float>(learning_rate);
  const float decay = static_cast<float>(config_.weight_decay);
  if (velocity_.empty())
    sgd_step(param.size(), param.data(), grad.data(), eta, decay);
  else
    momentum_step(param.size(), param.data(), grad.data(), velocity_.data() + offsets_[t],
                  static_cast<float>(config_.momentum), eta, decay);
}

}  // namespace gridtrain::learner
