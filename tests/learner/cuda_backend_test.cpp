// The CUDA backend: choosing it (these run everywhere), and, where a GPU is found, every layer and the loss
// against the CPU backend, finite differences through it, and whole learners trained on both. Without a GPU the
// GPU cases pass at once, printing "skipped: <why>", e.g. "no CUDA device: no NVIDIA driver is loaded (this
// build needs one for CUDA 13.0 or newer)".

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "learner/backend_factory.hpp"
#include "learner/cpu_backend.hpp"
#include "learner/learner.hpp"
#include "tests/learner/gradient_check.hpp"
#include "tests/learner/learner_fixtures.hpp"

namespace {

using gridtrain::config::Device;
using gridtrain::config::Precision;
using gridtrain::config::LayerSpec;
using gridtrain::config::LayerType;
using gridtrain::config::LearnerConfig;
using gridtrain::learner::Backend;
using gridtrain::learner::Buffer;
using gridtrain::learner::CpuBackend;
using gridtrain::learner::Dataset;
using gridtrain::learner::LayerGrads;
using gridtrain::learner::LayerParams;
using gridtrain::learner::LayerShape;
using gridtrain::learner::Learner;
using gridtrain::learner::Model;
using namespace gridtrain::learner::testing;

// The CUDA backend, or null after saying why the case is skipped.
std::unique_ptr<Backend> cuda_or_skip() {
  std::string why;
  auto cuda = gridtrain::learner::make_cuda_backend(why);
  if (!cuda) MESSAGE("skipped: " << why);
  return cuda;
}

bool have_gpu() {
  std::string why;
  return gridtrain::learner::make_cuda_backend(why) != nullptr;
}

// max |a - b| over max |b|: the error relative to the tensor's scale (an entry near 0 is a sum that cancelled,
// whose own relative error says nothing).
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return scale > 0 ? worst / scale : worst;
}

// One layer's forward and backward on one backend, from host data to host data.
struct LayerRun {
  std::vector<float> y, dx, dw, db;
};

LayerRun run_layer(Backend& backend, const LayerShape& shape, int batch, const std::vector<float>& x,
                   const std::vector<float>& w, const std::vector<float>& b, const std::vector<float>& dy) {
  auto put = [&](const std::vector<float>& host) {
    Buffer buffer = backend.allocate(std::max<std::size_t>(host.size(), 1));
    backend.upload(host, buffer.data());
    return buffer;
  };
  auto get = [&](const Buffer& buffer, std::size_t n) {
    std::vector<float> host(n);
    backend.download(buffer.data(), host);
    return host;
  };
  Buffer bx = put(x), bw = put(w), bb = put(b), bdy = put(dy);
  Buffer by = backend.allocate(dy.size()), bdx = backend.allocate(x.size());
  Buffer bdw = backend.allocate(std::max<std::size_t>(w.size(), 1)),
         bdb = backend.allocate(std::max<std::size_t>(b.size(), 1));
  auto layer = backend.make_layer(shape, batch);
  const bool params = shape.tensor_count > 0;
  const LayerParams p = params ? LayerParams{bw.data(), bb.data()} : LayerParams{};
  layer->forward(batch, bx.data(), by.data(), p);
  layer->backward(batch, bx.data(), by.data(), bdy.data(), bdx.data(), p,
                  params ? LayerGrads{bdw.data(), bdb.data()} : LayerGrads{});
  return {get(by, dy.size()), get(bdx, x.size()), get(bdw, w.size()), get(bdb, b.size())};
}

void same_layer(Backend& cuda, const std::vector<int>& input, const LayerSpec& spec, int batch, std::uint64_t seed,
                double tolerance = 1e-4, double at_least_off = 0) {
  CpuBackend cpu;
  const LayerShape shape = layer_shape(input, spec);
  std::mt19937_64 rng(seed);
  std::size_t w_floats = 0, b_floats = 0;
  if (spec.type == LayerType::dense) {
    w_floats = shape.input_floats() * spec.units;
    b_floats = spec.units;
  } else if (spec.type == LayerType::conv2d) {
    w_floats = std::size_t(spec.filters) * shape.channels() * spec.kernel * spec.kernel;
    b_floats = spec.filters;
  }
  const auto x = normal(rng, shape.input_floats() * batch);
  const auto w = normal(rng, w_floats, 0.1), b = normal(rng, b_floats, 0.1);
  const auto dy = normal(rng, shape.output_floats() * batch);
  INFO(gridtrain::config::to_string(spec.type) << " layer of the same_layer call with seed " << seed);
  const LayerRun want = run_layer(cpu, shape, batch, x, w, b, dy);
  const LayerRun got = run_layer(cuda, shape, batch, x, w, b, dy);
  CHECK(relative_error(got.y, want.y) <= tolerance);
  CHECK(relative_error(got.y, want.y) >= at_least_off);
  CHECK(relative_error(got.dx, want.dx) <= tolerance);
  CHECK(relative_error(got.dw, want.dw) <= tolerance);
  CHECK(relative_error(got.db, want.db) <= tolerance);
}

LearnerConfig cnn_config(Device device, int side = 12, int classes = 4) {
  LearnerConfig c = gridtrain::config::defaults().learner;
  c.device = device;
  c.seed = 3;
  c.batch = 16;
  c.epochs = 5;
  c.model = small_cnn(side, classes);
  c.optimizer.kind = gridtrain::config::OptimizerKind::momentum;
  c.optimizer.learning_rate = 0.02;
  c.optimizer.momentum = 0.9;
  c.optimizer.weight_decay = 1e-4;
  return c;
}

}  // namespace

TEST_CASE("learner.device cuda without a usable GPU is refused, naming learner.device and why") {
  auto r = Learner::create(cnn_config(Device::cuda), images(32, 12, 4, 1));
  if (have_gpu()) {
    REQUIRE(r.ok());
    CHECK(r.value()->backend_name() == "cuda");
    return;
  }
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().key == "learner.device");
  const std::string& m = r.error().message;
  INFO(m);
  CHECK((m.find("no CUDA device") != std::string::npos || m.find("no CUDA backend") != std::string::npos ||
         m.find("did not load") != std::string::npos));
}

TEST_CASE("learner.device auto without a usable GPU trains on the CPU backend and says why not CUDA") {
  auto learner = must_create(cnn_config(Device::automatic), images(32, 12, 4, 1));
  if (have_gpu()) {
    CHECK(learner->backend_name() == "cuda");
    CHECK(learner->backend_note().empty());
  } else {
    CHECK(learner->backend_name() == "cpu");
    CHECK_FALSE(learner->backend_note().empty());
    MESSAGE("device auto chose the CPU: " << learner->backend_note());
  }
  CHECK(std::isfinite(must_step(*learner).loss));
}

TEST_CASE("learner.precision tf32 or bf16 with learner.device auto and no usable GPU is refused, saying why") {
  for (const Precision precision : {Precision::tf32, Precision::bf16}) {
    CAPTURE(gridtrain::config::to_string(precision));
    LearnerConfig c = cnn_config(Device::automatic);
    c.precision = precision;
    auto r = Learner::create(c, images(32, 12, 4, 1));
    if (have_gpu()) {
      REQUIRE(r.ok());
      CHECK(r.value()->backend_name() == "cuda");
      continue;
    }
    // Training in FP32 on the CPU instead would be ten times slower than asked, and say nothing.
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().key == "learner.precision");
    const std::string& m = r.error().message;
    INFO(m);
    CHECK(m.find("expected fp32 on the CPU backend, found " + std::string(gridtrain::config::to_string(precision))) !=
          std::string::npos);
    CHECK(m.find("found no usable GPU") != std::string::npos);
  }
  // fp32, the default, falls back as before.
  CHECK(Learner::create(cnn_config(Device::automatic), images(32, 12, 4, 1)).ok());
}

TEST_CASE("learner.device cpu never loads the CUDA backend") {
  auto learner = must_create(cnn_config(Device::cpu), images(32, 12, 4, 1));
  CHECK(learner->backend_name() == "cpu");
  CHECK(learner->backend_note().empty());
}

TEST_CASE("every CUDA layer's forward and backward equal the CPU backend's within 1e-4, on the CNN's shapes") {
  auto cuda = cuda_or_skip();
  if (!cuda) return;
  // The Fashion-MNIST CNN's layers, at a batch of 8.
  same_layer(*cuda, {1, 28, 28}, {.type = LayerType::conv2d, .filters = 32, .kernel = 5, .stride = 1, .padding = 2}, 8,
             1);
  same_layer(*cuda, {32, 28, 28}, {.type = LayerType::relu}, 8, 2);
  same_layer(*cuda, {32, 28, 28}, {.type = LayerType::maxpool, .stride = 2, .size = 2}, 8, 3);
  same_layer(*cuda, {32, 14, 14}, {.type = LayerType::conv2d, .filters = 64, .kernel = 5, .stride = 1, .padding = 2}, 8,
             4);
  same_layer(*cuda, {3136}, {.type = LayerType::dense, .units = 1024}, 8, 5);
  same_layer(*cuda, {1024}, {.type = LayerType::dense, .units = 10}, 8, 6);
  // And the corners: strides, no padding, odd sizes, overlapping pools, a batch of one, a 2-D input.
  same_layer(*cuda, {3, 11, 9}, {.type = LayerType::conv2d, .filters = 5, .kernel = 3, .stride = 2, .padding = 0}, 3,
             7);
  same_layer(*cuda, {2, 1, 2}, {.type = LayerType::conv2d, .filters = 2, .kernel = 5, .stride = 1, .padding = 2}, 2, 8);
  same_layer(*cuda, {9, 7}, {.type = LayerType::conv2d, .filters = 4, .kernel = 3, .stride = 1, .padding = 1}, 1, 9);
  same_layer(*cuda, {3, 9, 9}, {.type = LayerType::maxpool, .stride = 2, .size = 3}, 2, 10);
  same_layer(*cuda, {1, 2, 7}, {.type = LayerType::dense, .units = 3}, 5, 11);
}

TEST_CASE("in tf32 and bf16 the CUDA layers stay within their precision of the CPU backend's FP32") {
  // Relative to the tensor's scale: TF32 keeps 10 bits of mantissa (a product's error about 5e-4), BF16 7 (4e-3);
  // the sums are FP32 in both. The bounds hold a few times that. TF32 is what cuBLAS and cuDNN may use, not must
  // (an FP32 algorithm may be the fastest), so only BF16, whose convolutions read BF16 copies, must differ from
  // FP32 (by more than FP32's own rounding, 1e-5); the speed figures of scripts/gpu-check.sh tell TF32 apart.
  for (const auto& [precision, tolerance] : {std::pair{Precision::tf32, 5e-3}, std::pair{Precision::bf16, 3e-2}}) {
    CAPTURE(gridtrain::config::to_string(precision));
    std::string why;
    auto cuda = gridtrain::learner::make_cuda_backend(why, precision);
    if (!cuda) {
      MESSAGE("skipped: " << why);
      return;
    }
    same_layer(*cuda, {1, 28, 28}, {.type = LayerType::conv2d, .filters = 32, .kernel = 5, .stride = 1, .padding = 2},
               8, 1, tolerance, precision == Precision::bf16 ? 1e-5 : 0);
    same_layer(*cuda, {32, 14, 14}, {.type = LayerType::conv2d, .filters = 64, .kernel = 5, .stride = 1, .padding = 2},
               8, 4, tolerance);
    same_layer(*cuda, {3, 11, 9}, {.type = LayerType::conv2d, .filters = 5, .kernel = 3, .stride = 2, .padding = 0}, 3,
               7, tolerance);
    same_layer(*cuda, {3136}, {.type = LayerType::dense, .units = 1024}, 8, 5, tolerance);
    same_layer(*cuda, {1, 2, 7}, {.type = LayerType::dense, .units = 3}, 5, 11, tolerance);
  }
}

TEST_CASE("a CNN trained in tf32 and in bf16 on CUDA follows the FP32 losses closely and learns as well") {
  if (!cuda_or_skip()) return;
  auto fp32 = must_create(cnn_config(Device::cuda), images(256, 12, 4, 7));
  std::vector<double> want;
  for (int s = 0; s < 48; ++s) want.push_back(must_step(*fp32).loss);
  const double accuracy = must_evaluate(*fp32, fp32->train_set()).accuracy;
  for (const Precision precision : {Precision::tf32, Precision::bf16}) {
    CAPTURE(gridtrain::config::to_string(precision));
    LearnerConfig c = cnn_config(Device::cuda);
    c.precision = precision;
    auto gpu = must_create(c, images(256, 12, 4, 7));
    for (int s = 0; s < 48; ++s) {
      CAPTURE(s);
      CHECK(must_step(*gpu).loss == doctest::Approx(want[s]).epsilon(0.05));
    }
    CHECK(must_evaluate(*gpu, gpu->train_set()).accuracy == doctest::Approx(accuracy).epsilon(0.03));
  }
}

TEST_CASE("the CUDA loss equals the CPU loss, its correct count and its gradient") {
  auto cuda = cuda_or_skip();
  if (!cuda) return;
  CpuBackend cpu;
  std::mt19937_64 rng(12);
  for (const auto& [classes, batch] : std::vector<std::pair<int, int>>{{10, 64}, {3, 1}, {10, 300}, {1000, 5}}) {
    CAPTURE(classes);
    CAPTURE(batch);
    const auto z = normal(rng, std::size_t(classes) * batch, 3.0);
    std::vector<std::int32_t> labels(batch);
    for (auto& l : labels) l = static_cast<std::int32_t>(rng() % classes);
    auto run = [&](Backend& backend, gridtrain::learner::LossResult& r) {
      Buffer bz = backend.allocate(z.size()), bd = backend.allocate(z.size());
      backend.upload(z, bz.data());
      auto loss = backend.make_loss(classes, batch);
      r = loss->forward(batch, bz.data(), labels.data());
      loss->backward(batch, labels.data(), bd.data());
      std::vector<float> d(z.size());
      backend.download(bd.data(), d);
      return d;
    };
    gridtrain::learner::LossResult want, got;
    const auto dwant = run(cpu, want), dgot = run(*cuda, got);
    CHECK(got.loss == doctest::Approx(want.loss).epsilon(1e-6));
    CHECK(got.correct == want.correct);
    CHECK(relative_error(dgot, dwant) <= 1e-5);
  }
}

TEST_CASE("CUDA gradients match finite differences, layer by layer and through a whole CNN") {
  auto cuda = cuda_or_skip();
  if (!cuda) return;
  constexpr double eps = 1e-2, atol = 2e-4, rtol = 2e-3;
  require_close(
      check_layer(*cuda, layer_shape({7}, {.type = LayerType::dense, .units = 4}), 3, 1, "normal", eps, atol, rtol));
  require_close(
      check_layer(*cuda, layer_shape({2, 3, 4}, {.type = LayerType::relu}), 3, 2, "away_from_zero", eps, atol, rtol));
  for (int stride : {1, 2})
    for (int padding : {0, 2})
      require_close(check_layer(
          *cuda,
          layer_shape({2, 7, 6},
                      {.type = LayerType::conv2d, .filters = 3, .kernel = 3, .stride = stride, .padding = padding}),
          2, 3 + stride + padding, "normal", eps, atol, rtol));
  require_close(check_layer(*cuda, layer_shape({2, 6, 7}, {.type = LayerType::maxpool, .stride = 2, .size = 2}), 2, 7,
                            "distinct", eps, atol, rtol));
  require_close(check_layer(*cuda, layer_shape({2, 7, 7}, {.type = LayerType::maxpool, .stride = 2, .size = 3}), 2, 8,
                            "distinct", eps, atol, rtol));
  require_close(check_loss(*cuda, 10, 4, 41, 1e-3, 1e-4, 1e-2));
  auto model = Model::build(cnn_config(Device::cuda, 9, 4).model);
  REQUIRE(model.ok());
  require_close(check_stack(*cuda, model.value(), 3, 51, 7, 1e-3, 2e-4, 2e-2));
}

TEST_CASE("a CNN trained on the CUDA backend follows the CPU backend's losses step by step") {
  if (!cuda_or_skip()) return;
  auto cpu = must_create(cnn_config(Device::cpu), images(256, 12, 4, 7));
  auto gpu = must_create(cnn_config(Device::cuda), images(256, 12, 4, 7));
  REQUIRE(gpu->backend_name() == "cuda");
  double first = 0, last = 0;
  for (int s = 0; s < 48; ++s) {
    const double want = must_step(*cpu).loss, got = must_step(*gpu).loss;
    CAPTURE(s);
    CHECK(got == doctest::Approx(want).epsilon(2e-3));  // float sums in other orders drift, slowly
    if (s == 0) first = got;
    last = got;
  }
  CHECK(last < first / 2);
  const auto a = arena(*cpu), b = arena(*gpu);
  CHECK(relative_error(b, a) <= 1e-2);
  CHECK(must_evaluate(*gpu, gpu->train_set()).accuracy ==
        doctest::Approx(must_evaluate(*cpu, cpu->train_set()).accuracy).epsilon(0.02));
}

TEST_CASE("on CUDA, minibatches gathered on the device train as those gathered on the host and copied up") {
  if (!cuda_or_skip()) return;
  LearnerConfig host_config = cnn_config(Device::cuda), device_config = cnn_config(Device::cuda);
  host_config.data_on_device = gridtrain::config::DataOnDevice::no;
  device_config.data_on_device = gridtrain::config::DataOnDevice::yes;
  // 40 samples in batches of 16: the last minibatch of each epoch is 8, and the order changes every 3 steps. With
  // the shard on the device, each batch size runs 3 steps as it is, then as a CUDA graph replayed with each step's
  // own first sample and learning rate (cosine: it changes every step): a replay that read the captured step's
  // would drift from the host path's losses at once.
  auto host = must_create(host_config, images(40, 12, 4, 7));
  auto device = must_create(device_config, images(40, 12, 4, 7));
  CHECK_FALSE(host->data_on_device());
  REQUIRE(device->data_on_device());
  MESSAGE(device->data_note());
  for (int s = 0; s < 30; ++s) {
    CAPTURE(s);
    const auto want = must_step(*host), got = must_step(*device);
    CHECK(got.batch == want.batch);
    CHECK(got.learning_rate == want.learning_rate);
    CHECK(got.loss == doctest::Approx(want.loss).epsilon(1e-4));  // the same sums; cuDNN's choices may differ
  }
  CHECK(relative_error(arena(*device), arena(*host)) <= 1e-3);
  const auto graphs = device->step_graphs();
  INFO(graphs.off);
  CHECK(graphs.off.empty());
  CHECK(graphs.captured == 2);  // one per batch size
  CHECK(graphs.replayed >= 20);
  CHECK(host->step_graphs().replayed == 0);  // the host path runs every step as it is
  // An evaluation between steps (its own batches, a workspace that may grow) leaves the graphs right.
  must_evaluate(*device, device->train_set());
  must_evaluate(*host, host->train_set());
  for (int s = 0; s < 6; ++s) CHECK(must_step(*device).loss == doctest::Approx(must_step(*host).loss).epsilon(1e-4));
  // Steps whose loss the host does not wait for (what the Trainer runs): the replayed graphs sum it on the device.
  REQUIRE(device->take_loss_totals().ok());
  double loss = 0;
  std::uint64_t samples = 0;
  for (int s = 0; s < 6; ++s) {
    const auto want = must_step(*host);
    loss += want.loss * want.batch;
    samples += static_cast<std::uint64_t>(want.batch);
    REQUIRE(device->step(Learner::LossRead::later).ok());
  }
  auto totals = device->take_loss_totals();
  REQUIRE(totals.ok());
  CHECK(totals.value().samples == samples);
  CHECK(totals.value().loss == doctest::Approx(loss).epsilon(1e-4));
}

TEST_CASE("on CUDA, the store follows the device, and a write into the store reaches the device") {
  if (!cuda_or_skip()) return;
  auto gpu = must_create(cnn_config(Device::cuda), images(128, 12, 4, 8));
  for (int s = 0; s < 10; ++s) must_step(*gpu);
  const auto trained = arena(*gpu);  // synchronize()d: the device's model

  // A CPU learner given the store evaluates as the device does: the store holds the device's model.
  auto cpu = must_create(cnn_config(Device::cpu), images(128, 12, 4, 8));
  cpu->params().assign(trained);
  const Dataset test = images(64, 12, 4, 9);
  CHECK(must_evaluate(*gpu, test).loss == doctest::Approx(must_evaluate(*cpu, test).loss).epsilon(1e-4));

  // An "elastic update" written into the store, as the allreduce writes it, reaches the device's model.
  gpu->params().update_each([](std::size_t, std::span<float> t) {
    for (float& v : t) v = 0.5f * v;
  });
  const auto halved = arena(*gpu);
  for (std::size_t i = 0; i < halved.size(); ++i)
    REQUIRE(halved[i] == doctest::Approx(0.5f * trained[i]).epsilon(1e-5));
  cpu->params().assign(halved);
  CHECK(must_evaluate(*gpu, test).loss == doctest::Approx(must_evaluate(*cpu, test).loss).epsilon(1e-4));
}

// The body is the one every backend runs (learner_fixtures.hpp); the CPU's run is in learner_test.cpp.
TEST_CASE("on CUDA, elastic updates beside step() keep the model whole and training, and the mirror runs") {
  if (!cuda_or_skip()) return;
  auto learner = must_create(cnn_config(Device::cuda), images(256, 12, 4, 10));
  check_elastic_updates_beside_steps(*learner, 200);
}

TEST_CASE("on CUDA, every elastic update beside step() lands once, in the store and on the device") {
  if (!cuda_or_skip()) return;
  auto config = cnn_config(Device::cuda);
  config.optimizer.kind = gridtrain::config::OptimizerKind::sgd;
  config.optimizer.learning_rate = 0;
  config.optimizer.weight_decay = 0;
  auto learner = must_create(config, images(256, 12, 4, 12));
  config.device = Device::cpu;
  auto reference = must_create(config, images(256, 12, 4, 12));
  check_elastic_updates_land_once(*learner, *reference, images(64, 12, 4, 13));
}

TEST_CASE("on CUDA, restoring the step count, the parameters and the velocity resumes training exactly") {
  if (!cuda_or_skip()) return;
  auto a = must_create(cnn_config(Device::cuda), images(40, 12, 4, 11));
  for (int s = 0; s < 7; ++s) must_step(*a);
  auto b = must_create(cnn_config(Device::cuda), images(40, 12, 4, 11));
  REQUIRE(b->restore_progress(7).ok());
  b->params().assign(arena(*a));
  const auto state = must_optimizer_state(*a);
  std::copy(state.begin(), state.end(), must_optimizer_state(*b).begin());
  for (int s = 0; s < 4; ++s) CHECK(must_step(*a).loss == doctest::Approx(must_step(*b).loss).epsilon(1e-6));
  CHECK(relative_error(arena(*b), arena(*a)) <= 1e-6);
}
