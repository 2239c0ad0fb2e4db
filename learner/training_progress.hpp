#pragma once
// TrainingProgress: what a node's trainer thread tells its Node for the NodeReports (and so `gridnode status`):
// samples trained on, the epochs finished and the last test accuracy. Written by the trainer, read by the Node's actor; atomics, no
// locks.

#include <atomic>
#include <cstdint>

namespace gridtrain::learner {

struct TrainingProgress {
  std::atomic<std::uint64_t> samples{0};
  std::atomic<std::uint32_t> epochs_done{0};  // the last epoch finished (1-based; 0: none yet)
  std::atomic<double> test_accuracy{-1};  // < 0: not evaluated yet
};

}  // namespace gridtrain::learner
