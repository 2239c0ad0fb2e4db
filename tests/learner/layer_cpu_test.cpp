// The CPU backend's layers on hand-computed cases, and the gemm() wrapper under them.

#include "learner/cpu_backend.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "learner/gemm.hpp"
#include "learner/layer_stack.hpp"
#include "tests/base/run_in_child.hpp"
#include "tests/learner/gradient_check.hpp"

namespace {

using gridtrain::config::LayerSpec;
using gridtrain::config::LayerType;
using gridtrain::config::ModelConfig;
using gridtrain::learner::CpuBackend;
using gridtrain::learner::gemm;
using gridtrain::learner::GemmRecorder;
using gridtrain::learner::GemmShape;
using gridtrain::learner::LayerGrads;
using gridtrain::learner::LayerParams;
using gridtrain::learner::LayerStack;
using gridtrain::learner::LossResult;
using gridtrain::learner::Model;
using gridtrain::learner::testing::layer_shape;
using gridtrain::testing::run_in_child;

}  // namespace

TEST_CASE("gemm computes row-major products with either operand transposed") {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  const int m = 3, n = 4, k = 5;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      std::vector<float> a(m * k), b(k * n), c(m * n, 9.0f);
      for (float& x : a) x = u(rng);
      for (float& x : b) x = u(rng);
      // op(A)[i][p] and op(B)[p][j] as stored: A is (k x m) when transposed, B is (n x k).
      auto at = [&](int i, int p) { return ta ? a[p * m + i] : a[i * k + p]; };
      auto bt = [&](int p, int j) { return tb ? b[j * k + p] : b[p * n + j]; };
      gemm(ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.0f, c.data(), n);
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double want = 0;
          for (int p = 0; p < k; ++p) want += double(at(i, p)) * bt(p, j);
          CHECK(c[i * n + j] == doctest::Approx(want).epsilon(1e-5));
        }
    }
}

TEST_CASE("a GemmRecorder sees every product on its thread, and its flops") {
  std::vector<float> a(6, 1.0f), b(6, 1.0f), c(9);
  {
    GemmRecorder rec;
    gemm(false, true, 3, 3, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 3);
    gemm(true, false, 2, 2, 3, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2);
    REQUIRE(rec.shapes().size() == 2);
    CHECK(rec.shapes()[0] == GemmShape{false, true, 3, 3, 2});
    CHECK(rec.shapes()[1] == GemmShape{true, false, 2, 2, 3});
    CHECK(rec.flops() == 2.0 * 18 + 2.0 * 12);
  }
  GemmRecorder again;  // the first one let go
  CHECK(again.shapes().empty());
}

TEST_CASE("a layer type the CPU backend does not make is a violated precondition: it aborts, naming the type") {
  const auto flatten = layer_shape({4}, {.type = LayerType::flatten});
  const auto end = run_in_child([&] { CpuBackend().make_layer(flatten, 1); });
  CHECK(end.aborted);
  CHECK(end.stderr_text == "gridtrain: precondition violated: the cpu backend makes no flatten layer\n");
}

TEST_CASE("dense computes x·Wᵀ + b") {
  CpuBackend cpu;
  auto layer = cpu.make_layer(layer_shape({3}, {.type = LayerType::dense, .units = 2}), 2);
  const float x[] = {1, 2, 3, -1, 0, 1};
  const float w[] = {1, 0, 2, 0, -1, 1};  // rows: units
  const float b[] = {0.5f, -0.5f};
  float y[4] = {};
  layer->forward(2, x, y, {w, b});
  CHECK(y[0] == 7.5f);  // 1 + 6 + 0.5
  CHECK(y[1] == 0.5f);  // -2 + 3 - 0.5
  CHECK(y[2] == 1.5f);  // -1 + 2 + 0.5
  CHECK(y[3] == 0.5f);  // 0 + 1 - 0.5
}

TEST_CASE("conv2d with padding and stride sums the taps under the kernel") {
  CpuBackend cpu;
  // One 3x3 channel, one 2x2 kernel of ones, padding 1, stride 2: output 2x2 at corners (-1,-1), (-1,1), ...
  const auto shape =
      layer_shape({1, 3, 3}, {.type = LayerType::conv2d, .filters = 1, .kernel = 2, .stride = 2, .padding = 1});
  REQUIRE(shape.output == std::vector<int>{1, 2, 2});
  auto layer = cpu.make_layer(shape, 1);
  const float x[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const float w[] = {1, 1, 1, 1};
  const float b[] = {10};
  float y[4] = {};
  layer->forward(1, x, y, {w, b});
  CHECK(y[0] == 11);  // only x(0,0) under the kernel
  CHECK(y[1] == 10 + 2 + 3);
  CHECK(y[2] == 10 + 4 + 7);
  CHECK(y[3] == 10 + 5 + 6 + 8 + 9);
}

TEST_CASE("maxpool keeps each window's max and sends the gradient back to it alone") {
  CpuBackend cpu;
  const auto shape = layer_shape({1, 4, 4}, {.type = LayerType::maxpool, .stride = 2, .size = 2});
  auto layer = cpu.make_layer(shape, 1);
  const float x[] = {1, 5, 2, 0,  //
                     3, 4, 8, 1,  //
                     0, 0, 1, 1,  //
                     9, 0, 2, 3};
  float y[4] = {};
  layer->forward(1, x, y, {});
  CHECK(std::vector<float>(y, y + 4) == std::vector<float>{5, 8, 9, 3});
  const float dy[] = {1, 2, 3, 4};
  float dx[16];
  std::fill_n(dx, 16, 7.0f);
  layer->backward(1, x, y, dy, dx, {}, {});
  const std::vector<float> want = {0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0, 4};
  CHECK(std::vector<float>(dx, dx + 16) == want);
}

TEST_CASE("overlapping pool windows that pick the same pixel add their gradients there") {
  CpuBackend cpu;
  const auto pool = layer_shape({1, 3, 5}, {.type = LayerType::maxpool, .stride = 2, .size = 3});
  REQUIRE(pool.output == std::vector<int>{1, 1, 2});
  auto layer = cpu.make_layer(pool, 1);
  const float x[] = {0, 0, 0, 0, 0,  //
                     0, 0, 9, 0, 0,  //
                     0, 0, 0, 0, 0};
  float y[2], dx[15];
  layer->forward(1, x, y, {});
  CHECK(y[0] == 9);
  CHECK(y[1] == 9);
  const float dy[] = {1.5f, 2.0f};
  layer->backward(1, x, y, dy, dx, {}, {});
  CHECK(dx[7] == 3.5f);
}

TEST_CASE("relu zeroes the negatives and their gradients") {
  CpuBackend cpu;
  auto layer = cpu.make_layer(layer_shape({4}, {.type = LayerType::relu}), 1);
  const float x[] = {-1, 2, 0, 3};
  float y[4], dx[4];
  layer->forward(1, x, y, {});
  CHECK(std::vector<float>(y, y + 4) == std::vector<float>{0, 2, 0, 3});
  const float dy[] = {5, 6, 7, 8};
  layer->backward(1, x, y, dy, dx, {}, {});
  CHECK(std::vector<float>(dx, dx + 4) == std::vector<float>{0, 6, 0, 8});
}

TEST_CASE("softmax cross-entropy equals the hand-computed value, and its gradient p - onehot over the batch") {
  CpuBackend cpu;
  auto loss = cpu.make_loss(3, 2);
  const float z[] = {1, 2, 3, 0, 0, 0};
  const std::int32_t labels[] = {2, 0};
  const auto r = loss->forward(2, z, labels);
  // Row 0: -log(e³ / (e + e² + e³)) = log(1 + e⁻¹ + e⁻²); row 1: log 3.
  const double row0 = std::log(1 + std::exp(-1.0) + std::exp(-2.0));
  CHECK(r.loss == doctest::Approx((row0 + std::log(3.0)) / 2).epsilon(1e-6));
  CHECK(r.correct == 2);  // row 1's scores tie: class 0, the lowest, is the prediction, and right
  float dz[6];
  loss->backward(2, labels, dz);
  const double s = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  CHECK(dz[0] == doctest::Approx(std::exp(1.0) / s / 2).epsilon(1e-6));
  CHECK(dz[2] == doctest::Approx((std::exp(3.0) / s - 1) / 2).epsilon(1e-6));
  CHECK(dz[3] == doctest::Approx((1.0 / 3 - 1) / 2).epsilon(1e-6));
  CHECK(dz[4] == doctest::Approx(1.0 / 3 / 2).epsilon(1e-6));
}

TEST_CASE("softmax cross-entropy stays finite on huge scores") {
  CpuBackend cpu;
  auto loss = cpu.make_loss(2, 1);
  const float z[] = {1000, -1000};
  const std::int32_t right[] = {0}, wrong[] = {1};
  CHECK(loss->forward(1, z, right).loss == doctest::Approx(0.0));
  CHECK(loss->forward(1, z, right).correct == 1);
  const auto r = loss->forward(1, z, wrong);
  CHECK(r.loss == doctest::Approx(2000.0));
  CHECK(r.correct == 0);
  float dz[2];
  loss->backward(1, wrong, dz);
  CHECK(dz[0] == 1.0f);
  CHECK(dz[1] == -1.0f);
}

TEST_CASE("flatten passes values and gradients through unchanged") {
  // The same model with and without a flatten before dense: dense flattens by itself, so the two must agree.
  ModelConfig with, without;
  with.input = without.input = {2, 3, 3};
  with.layers = {
      {.type = LayerType::flatten}, {.type = LayerType::dense, .units = 4}, {.type = LayerType::softmax_cross_entropy}};
  without.layers = {{.type = LayerType::dense, .units = 4}, {.type = LayerType::softmax_cross_entropy}};
  const Model a = Model::build(with).value(), b = Model::build(without).value();
  REQUIRE(a.parameter_count() == b.parameter_count());
  CpuBackend cpu;
  LayerStack sa(a, cpu, 2), sb(b, cpu, 2);
  std::vector<float> params(a.parameter_count()), inputs(36);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = std::sin(static_cast<float>(i));
  for (std::size_t i = 0; i < inputs.size(); ++i) inputs[i] = std::cos(static_cast<float>(i));
  cpu.upload(params, sa.params());
  cpu.upload(params, sb.params());
  const std::vector<std::int32_t> labels = {1, 3};
  CHECK(sa.forward(2, inputs, labels).loss == sb.forward(2, inputs, labels).loss);
  CHECK(std::equal(sa.output(0), sa.output(0) + 36, inputs.begin()));  // the flatten's output is its input
  sa.backward();
  sb.backward();
  CHECK(std::equal(sa.grads(), sa.grads() + params.size(), sb.grads()));
}

TEST_CASE("the loss read after the backward pass is the forward pass's own, and the gradients are unchanged") {
  // A training step queues forward, backward and update before it reads the loss (LayerStack::start_forward,
  // then loss()): the loss must still be that minibatch's, and the gradients those of forward() then backward().
  ModelConfig mc;
  mc.input = {6};
  mc.layers = {{.type = LayerType::dense, .units = 5}, {.type = LayerType::relu}, {.type = LayerType::dense, .units = 3},
               {.type = LayerType::softmax_cross_entropy}};
  const Model m = Model::build(mc).value();
  CpuBackend cpu;
  LayerStack early(m, cpu, 3), late(m, cpu, 3);
  std::vector<float> params(m.parameter_count()), first(18), second(12);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = 0.3f * std::sin(static_cast<float>(i));
  for (std::size_t i = 0; i < first.size(); ++i) first[i] = std::cos(static_cast<float>(i));
  for (std::size_t i = 0; i < second.size(); ++i) second[i] = std::sin(static_cast<float>(3 * i));
  cpu.upload(params, early.params());
  cpu.upload(params, late.params());
  const std::vector<std::int32_t> first_labels = {0, 2, 1}, second_labels = {2, 2};
  for (int round = 0; round < 2; ++round) {  // two batches of different sizes: each loss is its own batch's
    const auto& x = round == 0 ? first : second;
    const auto& y = round == 0 ? first_labels : second_labels;
    const int batch = static_cast<int>(y.size());
    const LossResult want = early.forward(batch, x, y);
    early.backward();
    late.start_forward(batch, x, y);
    late.backward();
    const LossResult got = late.loss();
    CHECK(got.loss == want.loss);
    CHECK(got.correct == want.correct);
    CHECK(std::equal(late.grads(), late.grads() + params.size(), early.grads()));
  }
}

TEST_CASE("a layer stack skips the input gradient nobody needs, and still fills every parameter gradient") {
  ModelConfig mc;
  mc.input = {5};
  mc.layers = {
      {.type = LayerType::relu}, {.type = LayerType::dense, .units = 3}, {.type = LayerType::softmax_cross_entropy}};
  const Model m = Model::build(mc).value();
  CpuBackend cpu;
  LayerStack stack(m, cpu, 1);
  std::vector<float> params(m.parameter_count(), 0.1f);
  cpu.upload(params, stack.params());
  const std::vector<float> x = {1, -2, 3, -4, 5};
  const std::vector<std::int32_t> label = {1};
  {
    GemmRecorder rec;
    stack.forward(1, x, label);
    stack.backward();
    CHECK(rec.shapes().size() == 2);  // forward and dW: no dx for the first dense layer
  }
  const float* g = stack.grads();
  CHECK(g[0] == doctest::Approx(1.0 / 3));   // (p0 - 0)·relu(x)[0], p uniform
  CHECK(g[1] == 0.0f);                       // relu(-2) = 0
  CHECK(g[15] == doctest::Approx(1.0 / 3));  // bias of class 0
  CHECK(g[16] == doctest::Approx(1.0 / 3 - 1));
}
