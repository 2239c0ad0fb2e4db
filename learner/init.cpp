#include "learner/init.hpp"

#include <cmath>
#include <numbers>

#include "config/enums.hpp"
#include "learner/splitmix64.hpp"

namespace gridtrain::learner {

namespace {

// Uniform in (0, 1]: never 0, so its log is finite.
double unit(std::uint64_t& state) { return (static_cast<double>(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53; }

}  // namespace

double init_std(const LayerShape& layer) {
  const bool conv = layer.spec.type == config::LayerType::conv2d;
  const double area = conv ? static_cast<double>(layer.spec.kernel) * layer.spec.kernel : 1.0;
  const double fan_in = conv ? layer.channels() * area : static_cast<double>(layer.input_floats());
  const double fan_out = (conv ? layer.spec.filters : layer.spec.units) * area;
  return layer.feeds_relu ? std::sqrt(2.0 / fan_in) : std::sqrt(2.0 / (fan_in + fan_out));
}

std::vector<float> initial_parameters(const Model& model, std::uint64_t seed) {
  std::vector<float> out(model.parameter_count(), 0.0f);
  for (const LayerShape& layer : model.layers()) {
    if (layer.tensor_count == 0) continue;
    const std::size_t t = layer.first_tensor;  // the weight; the bias (t + 1) stays 0
    const double sigma = init_std(layer);
    std::uint64_t state = seed;
    state = splitmix64(state) ^ (0xd1b54a32d192ed03ull * (t + 1));
    float* w = out.data() + model.tensor_offset(t);
    const std::size_t n = model.tensors()[t].size();
    // Box-Muller, both outputs used.
    for (std::size_t i = 0; i < n; i += 2) {
      const double r = std::sqrt(-2.0 * std::log(unit(state)));
      const double a = 2.0 * std::numbers::pi * unit(state);
      w[i] = static_cast<float>(sigma * r * std::cos(a));
      if (i + 1 < n) w[i + 1] = static_cast<float>(sigma * r * std::sin(a));
    }
  }
  return out;
}

}  // namespace gridtrain::learner
