#pragma once
// CpuSharePacer: how often a training node lets its lines run a round when no fixed step count is set
// (allreduce.every_steps = 0, allreduce.cpu_share = f < 1).
//
// Averaging runs on the node's data-plane thread beside the learner. Where the learner has every core (CPU training,
// or several nodes on one machine), each round's copies, socket writes, reductions and updates take CPU from
// training: back to back, on 2 cores, they halved two nodes' samples/s (BENCHMARKS.md, "Overlap"). A fixed step
// count cannot fit every model and machine (a round of a 64 MB model costs a thousand times one of a 64 KB model),
// so by default the node measures the cost instead: averaging may use f of the learner's time. After each step the
// trainer tells the pacer the step's time and the data plane's CPU time so far; the pacer keeps the difference
// between what averaging took and f of the training time, and a round may start while averaging is not ahead.
//
// Each allowance is a message to the node's LineMasters, so after one the pacer allows the next only once the
// averaging has done some work since (a round ran), or kIdleAllowEvery of training went by: a node whose lines run
// no round (alone, or not their master) sends a few a second, not one per step (one per step cost a node 10% of
// its samples/s on 2 cores).
//
// Idle time earns credit only up to f·kCreditWindow, so that a node alone for an hour does not run rounds back to
// back for f·1 h once peers come. The measure is the node's whole data plane (every line, ours or another
// master's), so a node's lines slow down when its peers' rounds load it too. Pure: no clock of its own.

#include <chrono>

namespace gridtrain::learner {

class CpuSharePacer {
 public:
  static constexpr std::chrono::nanoseconds kCreditWindow = std::chrono::seconds(1);
  static constexpr std::chrono::nanoseconds kIdleAllowEvery = std::chrono::milliseconds(10);

  // REQUIRES: 0 < share <= 1
  explicit CpuSharePacer(double share) : share_(share) {}

  // One more learner step took `step` (wall time); the averaging has used `averaging_total` of CPU in all, a running
  // total (what it had used before the first step is not counted; a total that goes back counts as no new work).
  // True when one more round may start.
  bool after_step(std::chrono::nanoseconds step, std::chrono::nanoseconds averaging_total) {
    if (!seen_total_) {
      seen_total_ = true;
      last_total_ = averaging_total;
    }
    const double used = averaging_total > last_total_ ? static_cast<double>((averaging_total - last_total_).count())
                                                       : 0.0;
    last_total_ = averaging_total;
    ahead_ += used - share_ * static_cast<double>(step.count());
    const double credit = share_ * static_cast<double>(kCreditWindow.count());
    if (ahead_ < -credit) ahead_ = -credit;
    since_allow_ += step;
    if (ahead_ > 0) return false;
    if (averaging_total <= total_at_allow_ && since_allow_ < kIdleAllowEvery) return false;
    total_at_allow_ = averaging_total;
    since_allow_ = std::chrono::nanoseconds(0);
    return true;
  }

  // How far averaging is ahead of its share (negative: credit), in ns.
  double ahead_ns() const { return ahead_; }

 private:
  double share_;
  double ahead_ = 0;
  std::chrono::nanoseconds last_total_{0};
  bool seen_total_ = false;
  std::chrono::nanoseconds total_at_allow_{0};           // averaging_total at the last allowance
  std::chrono::nanoseconds since_allow_{kIdleAllowEvery};  // training time since then (the first step may allow)
};

}  // namespace gridtrain::learner
