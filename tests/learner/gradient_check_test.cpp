// Every layer type of the CPU backend against finite differences: input gradients and parameter gradients, on
// small shapes drawn at random.

#include "tests/learner/gradient_check.hpp"

#include <doctest/doctest.h>

#include <random>

#include "learner/cpu_backend.hpp"
#include "tests/learner/learner_fixtures.hpp"

namespace {

using gridtrain::config::LayerSpec;
using gridtrain::config::LayerType;
using gridtrain::learner::CpuBackend;
using gridtrain::learner::Model;
using namespace gridtrain::learner::testing;

// Linear layers are checked tightly: their central difference is exact but for float rounding.
constexpr double eps = 1e-2, abs_tol = 2e-4, rel_tol = 2e-3;

}  // namespace

TEST_CASE("dense gradients match finite differences, for random small shapes") {
  CpuBackend cpu;
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 6; ++trial) {
    const int in = 1 + static_cast<int>(rng() % 9), units = 1 + static_cast<int>(rng() % 6);
    const int batch = 1 + static_cast<int>(rng() % 4);
    CAPTURE(in);
    CAPTURE(units);
    CAPTURE(batch);
    // A 2-D input checks that dense flattens what it is given.
    const std::vector<int> input = trial % 2 ? std::vector<int>{in} : std::vector<int>{1, 2, in};
    require_close(check_layer(cpu, layer_shape(input, {.type = LayerType::dense, .units = units}), batch, rng(),
                              "normal", eps, abs_tol, rel_tol));
  }
}

TEST_CASE("relu gradients match finite differences away from the kink") {
  CpuBackend cpu;
  require_close(check_layer(cpu, layer_shape({2, 3, 4}, {.type = LayerType::relu}), 3, 5, "away_from_zero", eps,
                            abs_tol, rel_tol));
  require_close(
      check_layer(cpu, layer_shape({17}, {.type = LayerType::relu}), 2, 6, "away_from_zero", eps, abs_tol, rel_tol));
}

TEST_CASE("conv2d gradients match finite differences, stride 1 and 2, padding 0 and 2") {
  CpuBackend cpu;
  std::mt19937_64 rng(23);
  for (int stride : {1, 2})
    for (int padding : {0, 2})
      for (int trial = 0; trial < 3; ++trial) {
        const int channels = 1 + static_cast<int>(rng() % 3), filters = 1 + static_cast<int>(rng() % 3);
        const int kernel = 1 + static_cast<int>(rng() % 4);
        const int height = kernel + static_cast<int>(rng() % 5), width = kernel + static_cast<int>(rng() % 5);
        const int batch = 1 + static_cast<int>(rng() % 3);
        CAPTURE(stride);
        CAPTURE(padding);
        CAPTURE(channels);
        CAPTURE(filters);
        CAPTURE(kernel);
        CAPTURE(height);
        CAPTURE(width);
        CAPTURE(batch);
        const LayerSpec spec{
            .type = LayerType::conv2d, .filters = filters, .kernel = kernel, .stride = stride, .padding = padding};
        require_close(check_layer(cpu, layer_shape({channels, height, width}, spec), batch, rng(), "normal", eps,
                                  abs_tol, rel_tol));
      }
}

TEST_CASE("conv2d whose padding is wider than the image still matches finite differences") {
  CpuBackend cpu;
  for (int stride : {1, 2}) {
    CAPTURE(stride);
    const LayerSpec spec{.type = LayerType::conv2d, .filters = 2, .kernel = 5, .stride = stride, .padding = 2};
    require_close(check_layer(cpu, layer_shape({2, 1, 2}, spec), 2, 13, "normal", eps, abs_tol, rel_tol));
    require_close(check_layer(cpu, layer_shape({1, 3, 1}, spec), 1, 14, "normal", eps, abs_tol, rel_tol));
  }
}

TEST_CASE("conv2d on a (height, width) input treats it as one channel") {
  CpuBackend cpu;
  const LayerSpec spec{.type = LayerType::conv2d, .filters = 2, .kernel = 3, .stride = 1, .padding = 1};
  require_close(check_layer(cpu, layer_shape({5, 6}, spec), 2, 9, "normal", eps, abs_tol, rel_tol));
}

TEST_CASE("maxpool gradients match finite differences, 2x2 stride 2 and 3x3 stride 2 (overlapping)") {
  CpuBackend cpu;
  std::mt19937_64 rng(31);
  for (int size : {2, 3})
    for (int trial = 0; trial < 3; ++trial) {
      const int channels = 1 + static_cast<int>(rng() % 3);
      const int height = size + static_cast<int>(rng() % 5), width = size + static_cast<int>(rng() % 5);
      const int batch = 1 + static_cast<int>(rng() % 3);
      CAPTURE(size);
      CAPTURE(channels);
      CAPTURE(height);
      CAPTURE(width);
      const LayerSpec spec{.type = LayerType::maxpool, .stride = 2, .size = size};
      require_close(check_layer(cpu, layer_shape({channels, height, width}, spec), batch, rng(), "distinct", eps,
                                abs_tol, rel_tol));
    }
}

TEST_CASE("softmax cross-entropy gradients match finite differences of the mean loss") {
  CpuBackend cpu;
  require_close(check_loss(cpu, 10, 4, 41, 1e-3, 1e-4, 1e-2));
  require_close(check_loss(cpu, 2, 1, 42, 1e-3, 1e-4, 1e-2));
  require_close(check_loss(cpu, 7, 5, 43, 1e-3, 1e-4, 1e-2));
}

TEST_CASE("a whole CNN's parameter gradients match finite differences of the loss, through flatten") {
  gridtrain::config::ModelConfig mc;
  mc.input = {2, 9, 9};
  mc.layers = {{.type = LayerType::conv2d, .filters = 3, .kernel = 3, .stride = 1, .padding = 1},
               {.type = LayerType::relu},
               {.type = LayerType::maxpool, .stride = 2, .size = 3},
               {.type = LayerType::conv2d, .filters = 4, .kernel = 2, .stride = 2, .padding = 0},
               {.type = LayerType::flatten},
               {.type = LayerType::dense, .units = 6},
               {.type = LayerType::relu},
               {.type = LayerType::dense, .units = 4},
               {.type = LayerType::softmax_cross_entropy}};
  auto model = Model::build(mc);
  REQUIRE(model.ok());
  CpuBackend cpu;
  require_close(check_stack(cpu, model.value(), 3, 51, 1, 1e-3, 2e-4, 2e-2));
}

TEST_CASE("a whole MLP's parameter gradients match finite differences of the loss") {
  gridtrain::config::ModelConfig mc;
  mc.input = {12};
  mc.layers = {{.type = LayerType::dense, .units = 8},
               {.type = LayerType::relu},
               {.type = LayerType::dense, .units = 5},
               {.type = LayerType::softmax_cross_entropy}};
  auto model = Model::build(mc);
  REQUIRE(model.ok());
  CpuBackend cpu;
  require_close(check_stack(cpu, model.value(), 4, 61, 1, 1e-3, 2e-4, 2e-2));
}

// The CUDA tests' CNN on the CPU backend, with the same draws: three of the 513 checked entries, weights of the
// first dense layer, sit at the kink of the relu after it (layers[7].weight[115]: central difference 0.011, half
// the slope on one side, where the gradient is 0). The check must see them as kinks and pass, on every backend.
TEST_CASE("a CNN with an entry at a relu's kink passes its gradient check, and says it found the kink") {
  auto model = Model::build(small_cnn(9, 4));
  REQUIRE(model.ok());
  CpuBackend cpu;
  const GradientReport report = check_stack(cpu, model.value(), 3, 51, 7, 1e-3, 2e-4, 2e-2);
  require_close(report);
  CHECK(report.kinks >= 1);
  CHECK(report.first_kink.find("layers[7].weight[") == 0);
}
