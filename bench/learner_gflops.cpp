// Learner throughput against the GEMM roofline: samples/s and achieved GFLOP/s of a full training step
// (Learner::step: snapshot, forward, backward, locked update), where the FLOPs counted are those of the step's
// matrix products (2·m·n·k each), against cblas_sgemm's rate on the very same products timed alone with warm
// buffers. The ratio says how much of the step is not GEMM: elementwise layers, im2col, copies, the optimizer.
//
// Usage: bench_learner_gflops [--quick] [--threads N]
// OPENBLAS_CORETYPE is left as the environment sets it; so is OpenBLAS's thread count unless --threads is given.
// Both hold for the step and for the GEMMs alone.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "learner/dataset.hpp"
#include "learner/gemm.hpp"
#include "learner/learner.hpp"
#include "learner/reference_cnn.hpp"

namespace {

using gridtrain::config::LayerSpec;
using namespace gridtrain::learner;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Random images and labels, shaped like Fashion-MNIST: throughput does not depend on the values.
Dataset synthetic(std::size_t count) {
  std::mt19937 rng(7);
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  Dataset d;
  d.count = count;
  d.sample_shape = {1, 28, 28};
  d.sample_floats = 784;
  d.classes = 10;
  d.images.resize(count * 784);
  for (float& x : d.images) x = pixel(rng);
  d.labels.resize(count);
  for (auto& l : d.labels) l = static_cast<std::int32_t>(rng() % 10);
  return d;
}

// Seconds per call of `iters` calls of fn.
template <class Fn>
double time_per_call(int iters, Fn&& fn) {
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) fn();
  return seconds_since(start) / iters;
}

// How many calls of fn fill about `target` seconds.
template <class Fn>
int calibrate(double target, Fn&& fn) {
  const auto start = Clock::now();
  fn();
  const double once = std::max(seconds_since(start), 1e-6);
  return std::max(1, static_cast<int>(target / once));
}

// The recorded products, replayed alone: each with its own operands, allocated and touched once.
class GemmReplay {
 public:
  explicit GemmReplay(std::vector<GemmShape> shapes) : shapes_(std::move(shapes)) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (const GemmShape& s : shapes_) {
      Operands o{std::vector<float>(std::size_t(s.m) * s.k), std::vector<float>(std::size_t(s.k) * s.n),
                 std::vector<float>(std::size_t(s.m) * s.n)};
      for (float& x : o.a) x = u(rng);
      for (float& x : o.b) x = u(rng);
      operands_.push_back(std::move(o));
    }
  }

  void run() {
    for (std::size_t i = 0; i < shapes_.size(); ++i) {
      const GemmShape& s = shapes_[i];
      Operands& o = operands_[i];
      gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, o.a.data(), s.trans_a ? s.m : s.k, o.b.data(),
           s.trans_b ? s.k : s.n, 0.0f, o.c.data(), s.n);
    }
  }

 private:
  struct Operands {
    std::vector<float> a, b, c;
  };
  std::vector<GemmShape> shapes_;
  std::vector<Operands> operands_;
};

struct Figures {
  double samples_per_s = 0;
  double step_gflops = 0;
  double gemm_gflops = 0;
  double step_mflop = 0;
};

constexpr int reps = 7;

void step(Learner& learner) {
  if (auto stepped = learner.step(); !stepped) {
    std::fprintf(stderr, "error: %s\n", stepped.error().to_string().c_str());
    std::exit(1);
  }
}

Figures measure(const std::vector<LayerSpec>& layers, int batch, double seconds) {
  gridtrain::config::LearnerConfig config = gridtrain::config::defaults().learner;
  config.device = gridtrain::config::Device::cpu;
  config.batch = batch;
  config.threads = 0;  // the environment's
  config.model.input = {1, 28, 28};
  config.model.layers = layers;
  auto created = Learner::create(config, synthetic(static_cast<std::size_t>(batch) * 16));
  if (!created.ok()) {
    std::fprintf(stderr, "error: %s\n", created.error().to_string().c_str());
    std::exit(1);
  }
  Learner& learner = *created.value();
  // Every step of the run has a full batch (16 per epoch): the products are the same each step.
  for (int i = 0; i < 5; ++i) step(learner);  // warm: caches, OpenBLAS's threads and buffers
  std::vector<GemmShape> shapes;
  double flops = 0;
  {
    GemmRecorder recorder;
    step(learner);
    shapes = recorder.shapes();
    flops = recorder.flops();
  }
  GemmReplay replay(std::move(shapes));
  replay.run();
  const int step_iters = calibrate(seconds / reps, [&] { step(learner); });
  const int gemm_iters = calibrate(seconds / reps, [&] { replay.run(); });
  // Interleaved, and the best of each kept (not the mean): noise on a shared machine only ever adds time, and
  // taking turns gives both the same quiet moments.
  double step_s = 1e30, gemm_s = 1e30;
  for (int r = 0; r < reps; ++r) {
    step_s = std::min(step_s, time_per_call(step_iters, [&] { step(learner); }));
    gemm_s = std::min(gemm_s, time_per_call(gemm_iters, [&] { replay.run(); }));
  }
  return {batch / step_s, flops / step_s * 1e-9, flops / gemm_s * 1e-9, flops * 1e-6};
}

void print(const char* name, int batch, const Figures& f) {
  std::printf(
      "%-28s batch %4d  %9.0f samples/s  step %8.1f MFLOP  %6.1f GFLOP/s  sgemm alone %6.1f GFLOP/s  "
      "ratio %.2f\n",
      name, batch, f.samples_per_s, f.step_mflop, f.step_gflops, f.gemm_gflops, f.step_gflops / f.gemm_gflops);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      set_blas_threads(std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "error: unknown argument '%s'; usage: bench_learner_gflops [--quick] [--threads N]\n",
                   argv[i]);
      return 2;
    }
  }
  const double seconds = quick ? 0.3 : 2.0;  // per measurement
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf(
      "OpenBLAS threads %d, OPENBLAS_CORETYPE=%s; best of %d interleaved timings; GFLOP counts the step's "
      "GEMMs (2mnk each)\n",
      blas_threads(), coretype ? coretype : "(unset)", reps);

  const std::vector<LayerSpec> mlp = gridtrain::config::defaults().learner.model.layers;  // 784-256-128-10
  for (int batch : {64, 128, 256}) print("mlp 784-256-128-10", batch, measure(mlp, batch, seconds));

  const std::vector<LayerSpec> cnn = reference_cnn().layers;  // on 1x28x28, as measure() sets
  print("cnn c5x32-p2-c5x64-p2-1024-10", 64, measure(cnn, 64, seconds));
  return 0;
}
