// The Fashion-MNIST CNN on one GPU (bench/cuda_cnn_setup.hpp): training samples/s, and test accuracy after
// each epoch. bench/pytorch_cnn.py runs the same model, batch and recipe in PyTorch; scripts/gpu-check.sh runs
// the two side by side.
//
//   bench_cuda_cnn [--data DIR] [--device cuda|cpu|auto] [--epochs 15] [--batch 64] [--steps N] ...
//
// samples/s counts training steps only (the minibatch gathered, on the device or sent up, forward, backward,
// optimizer, and the mirror running beside them), after 50 warm-up steps; evaluations are not timed. With
// --steps N it times N steps queued back to back, their losses left on the device as gridnode's Trainer leaves
// them (from the first to the last one's end), and stops without evaluating; without, each step is timed to its
// loss read.

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "bench/cuda_cnn_setup.hpp"
#include "learner/learner.hpp"

using namespace gridtrain;

namespace {

[[noreturn]] void fail(const Error& e) {
  std::fprintf(stderr, "error: %s\n", e.to_string().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const bench::CnnOptions o = bench::parse(argc, argv);
  learner::Dataset train = bench::load(o.data, true);
  const learner::Dataset test = o.steps > 0 ? learner::Dataset{} : bench::load(o.data, false);
  auto created = learner::Learner::create(bench::cnn_learner(o), std::move(train));
  if (!created.ok()) {
    std::fprintf(stderr, "error: %s\n", created.error().to_string().c_str());
    return 2;
  }
  learner::Learner& l = *created.value();
  std::printf("cnn on %s%s%s: %zu parameters, batch %d, lr %g, %d epochs, %s, the training set %s\n",
              std::string(l.backend_name()).c_str(), l.backend_note().empty() ? "" : " ", l.backend_note().c_str(),
              l.model().parameter_count(), o.batch, o.learning_rate, o.epochs,
              std::string(config::to_string(o.precision)).c_str(), l.data_note().c_str());

  using clock = std::chrono::steady_clock;
  constexpr long warmup = 50;
  double timed_seconds = 0;
  long timed_steps = 0, timed_samples = 0, step = 0;
  auto timed_step = [&] {
    const auto start = clock::now();
    auto stepped = l.step();
    if (!stepped) fail(stepped.error());
    const int batch = stepped.value().batch;
    if (++step > warmup) {
      timed_seconds += std::chrono::duration<double>(clock::now() - start).count();
      ++timed_steps;
      timed_samples += batch;
    }
  };

  if (o.steps > 0) {
    // As gridnode's Trainer steps: the loss left on the device (LossRead::later), the steps queued one after
    // another, and the time taken over all of them, to when the last one's loss is in (take_loss_totals waits).
    for (long s = 0; s < warmup; ++s) timed_step();
    if (auto taken = l.take_loss_totals(); !taken) fail(taken.error());
    const auto start = clock::now();
    for (long s = 0; s < o.steps; ++s) {
      auto stepped = l.step(learner::Learner::LossRead::later);
      if (!stepped) fail(stepped.error());
      timed_samples += stepped.value().batch;
      ++timed_steps;
    }
    if (auto taken = l.take_loss_totals(); !taken) fail(taken.error());
    timed_seconds = std::chrono::duration<double>(clock::now() - start).count();
  } else {
    std::printf("%6s %10s %12s %10s %13s\n", "epoch", "samples", "samples/s", "test_loss", "test_accuracy");
    double accuracy = 0;
    while (!l.done()) {
      timed_step();
      if (l.steps() % static_cast<std::uint64_t>(l.steps_per_epoch()) == 0) {
        auto evaluated = l.evaluate(test);
        if (!evaluated) fail(evaluated.error());
        const learner::Evaluation& e = evaluated.value();
        accuracy = e.accuracy;
        std::printf("%6d %10llu %12.0f %10.4f %13.4f\n", l.epoch(), static_cast<unsigned long long>(l.samples()),
                    timed_seconds > 0 ? timed_samples / timed_seconds : 0.0, e.loss, e.accuracy);
        std::fflush(stdout);
      }
    }
    std::printf("gridtrain %s %s: test accuracy after %d epochs: %.4f\n", std::string(l.backend_name()).c_str(),
                std::string(config::to_string(o.precision)).c_str(), o.epochs, accuracy);
  }
  std::printf("gridtrain %s %s: %.0f samples/s (batch %d, %ld timed steps, %.3f ms/step)\n",
              std::string(l.backend_name()).c_str(), std::string(config::to_string(o.precision)).c_str(),
              timed_samples / timed_seconds, o.batch, timed_steps, 1e3 * timed_seconds / timed_steps);
  const learner::Backend::StepGraphs graphs = l.step_graphs();
  std::printf("steps as CUDA graphs: %llu captured, %llu of %llu steps replayed%s%s\n",
              static_cast<unsigned long long>(graphs.captured), static_cast<unsigned long long>(graphs.replayed),
              static_cast<unsigned long long>(l.steps()), graphs.off.empty() ? "" : "; off: ", graphs.off.c_str());
  // What sharing the model with the store cost: on CUDA its loads and the mirror's cycles, on the CPU a snapshot
  // per step and per evaluation.
  const learner::StoreTransfers moved = l.store_transfers();
  const double passes = static_cast<double>(moved.passes);
  std::printf("store: %llu passes in %llu steps (a pass per %.1f steps), %.1f MB per pass, %.2f MB per step\n",
              static_cast<unsigned long long>(moved.passes), static_cast<unsigned long long>(l.steps()),
              l.steps() / passes, moved.bytes / passes / 1e6, moved.bytes / 1e6 / l.steps());
  return 0;
}
