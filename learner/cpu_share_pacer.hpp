#pragma once
// CpuSharePacer: how often a training node lets its lines run a round when no fixed step count is set
// (allreduce.every_steps = 0, allreduce.cpu_share = f < 1).
//
// Averaging runs beside the learner: a round's copies, socket writes, reductions and updates on the data plane's
// thread, its messages and timers on the actors' threads, and (PyTorch's deferred store) the pull's apply on the
// training thread. Where the learner has every core (CPU training, or several nodes on one machine) all of it is
// taken from training: back to back, on 2 cores, rounds halved two nodes' samples/s (BENCHMARKS.md, "Overlap"). A
// fixed step count cannot fit every model and machine (a round of a 64 MB model costs a thousand times one of a
// 64 KB model), so by default the node measures the cost instead: averaging may use f of the learner's time. After
// each step the trainer tells the pacer the step's time, averaging's CPU time so far (all of the above) and the
// rounds completed so far; the pacer keeps the difference between what averaging took and f of the training time,
// and a round may start while averaging is not ahead.
//
// Each allowance may wake the node's LineMasters, so after one the pacer allows the next only once a round has
// completed on the node's lines since, or kIdleAllowEvery of training went by: a node whose lines run no round
// (alone, or not their master) allows a few a second, not one per step (one message per step cost a node 10% of its
// samples/s on 2 cores). Rounds, not CPU time, say that averaging went on: the clock counts the actors' threads,
// which tick for reasons of their own (an allowance's own message among them).
//
// Idle time earns credit only up to f·kCreditWindow, so that a node alone for an hour does not run rounds back to
// back for f·1 h once peers come. The measure is the whole process's averaging (every line, ours or another
// master's), so a node's lines slow down when its peers' rounds load it too. Pure: no clock of its own.
//
// A floor: whatever the share says, a round may start once kFloorEvery of training has passed since the last
// allowance. The clock counts the actors' threads whole, and they may burn CPU that no round of ours asked for
// (CAF messages circling between two nodes for good, once: a quarter of a core; a flood of connections at the
// gate, whose handshakes run on CAF's thread, would too): without a floor such a node's lines stopped averaging for
// the rest of its run, silently. With one, it averages at least every kFloorEvery, and the caller can say so
// (floor_allowances()). A round that costs more than f·kFloorEvery of CPU (a big model on a slow machine) runs that
// often too, over its share.

#include <chrono>
#include <cstdint>

namespace gridtrain::learner {

class CpuSharePacer {
 public:
  static constexpr std::chrono::nanoseconds kCreditWindow = std::chrono::seconds(1);
  static constexpr std::chrono::nanoseconds kIdleAllowEvery = std::chrono::milliseconds(10);
  static constexpr std::chrono::nanoseconds kFloorEvery = std::chrono::seconds(2);

  // REQUIRES: 0 < share <= 1
  explicit CpuSharePacer(double share) : share_(share) {}

  // One more learner step took `step` (wall time); the averaging has used `averaging_total` of CPU in all, a running
  // total (what it had used before the first step is not counted; a total that goes back counts as no new work), and
  // `rounds_done` rounds have completed on the node's lines in all. True when one more round may start.
  bool after_step(std::chrono::nanoseconds step, std::chrono::nanoseconds averaging_total, std::uint64_t rounds_done) {
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
    if (ahead_ > 0) {
      if (since_allow_ < kFloorEvery) return false;
      ++floor_allowances_;  // over its share: the floor allows this one
    } else if (rounds_done == rounds_at_allow_ && since_allow_ < kIdleAllowEvery) {
      return false;
    }
    rounds_at_allow_ = rounds_done;
    since_allow_ = std::chrono::nanoseconds(0);
    return true;
  }

  double share() const { return share_; }
  // How far averaging is ahead of its share (negative: credit), in ns.
  double ahead_ns() const { return ahead_; }
  // The rounds allowed by the floor alone (kFloorEvery), averaging being over its share.
  std::uint64_t floor_allowances() const { return floor_allowances_; }

 private:
  double share_;
  double ahead_ = 0;
  std::chrono::nanoseconds last_total_{0};
  bool seen_total_ = false;
  std::uint64_t rounds_at_allow_ = 0;                      // rounds_done at the last allowance
  std::chrono::nanoseconds since_allow_{kIdleAllowEvery};  // training time since then (the first step may allow)
  std::uint64_t floor_allowances_ = 0;
};

}  // namespace gridtrain::learner
