#pragma once
// TrainingProgress: what a node's trainer thread tells its Node for the NodeReports (and so `gridnode status`):
// samples trained on and the last test accuracy. Written by the trainer, read by the Node's actor; atomics, no
// locks.

#include <atomic>
#include <cstdint>

namespace gridtrain::learner {

struct TrainingProgress {
  std::atomic<std::uint64_t> samples{0};
  std::atomic<double> test_accuracy{-1};  // < 0: not evaluated yet
};

}  // namespace gridtrain::learner
