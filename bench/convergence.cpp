// Convergence on Fashion-MNIST: test accuracy of a single node after E epochs (DESIGN.md, "Measuring").
// The cluster modes (elastic averaging across nodes) compare against this single-node line.
//
//   bench_convergence [--epochs E] [--set key=value]...
//
// Prints one line per epoch (samples, seconds, train loss, test loss, test accuracy) and a final line.

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "learner/dataset.hpp"
#include "learner/learner.hpp"

using namespace gridtrain;

int main(int argc, char** argv) {
  std::vector<std::string> overrides{"learner.kind=model"};
  int epochs = 10;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--epochs") && i + 1 < argc) {
      epochs = std::stoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--set") && i + 1 < argc) {
      overrides.push_back(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_convergence [--epochs E] [--set key=value]...\n");
      return 2;
    }
  }
  overrides.push_back("learner.epochs=" + std::to_string(epochs));
  auto cfg = config::load_string("{}", "<bench>", overrides);
  if (!cfg) {
    std::fprintf(stderr, "error: %s\n", cfg.error().to_string().c_str());
    return 2;
  }
  auto train = learner::load_train_set(cfg.value().data);
  auto test = learner::load_test_set(cfg.value().data);
  if (!train || !test) {
    std::fprintf(stderr, "error: %s\n", (!train ? train.error() : test.error()).to_string().c_str());
    return 2;
  }
  auto created = learner::Learner::create(cfg.value().learner, std::move(train.value()));
  if (!created) {
    std::fprintf(stderr, "error: %s\n", created.error().to_string().c_str());
    return 2;
  }
  auto& l = *created.value();
  std::printf("single node, %zu parameters, batch %d, %d epochs\n", l.model().parameter_count(),
              cfg.value().learner.batch, epochs);
  std::printf("%6s %10s %8s %11s %10s %13s\n", "epoch", "samples", "seconds", "train_loss", "test_loss",
              "test_accuracy");
  auto start = std::chrono::steady_clock::now();
  double loss_sum = 0;
  int loss_steps = 0;
  learner::Evaluation eval;
  while (!l.done()) {
    loss_sum += l.step().loss;
    ++loss_steps;
    if (l.steps() % static_cast<std::uint64_t>(l.steps_per_epoch()) == 0) {
      eval = l.evaluate(test.value());
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("%6d %10llu %8.1f %11.4f %10.4f %13.4f\n", l.epoch(), static_cast<unsigned long long>(l.samples()),
                  seconds, loss_sum / loss_steps, eval.loss, eval.accuracy);
      std::fflush(stdout);
      loss_sum = 0;
      loss_steps = 0;
    }
  }
  std::printf("final test accuracy: %.4f\n", eval.accuracy);
  return 0;
}
