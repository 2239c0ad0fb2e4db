#pragma once
// RoundPacing: when a training node lets its lines start one more round. Once every allreduce.every_steps learner
// steps; or, with every_steps 0 and cpu_share f below 1, when the node's averaging has used no more than f of the
// training time (learner/cpu_share_pacer.hpp). The Trainer asks it after each of its steps; the PyTorch front end's
// averager after each of the user's optimizer steps. With neither (every_steps 0, f = 1) it never allows one, and
// the node's lines run rounds back to back without asking. It logs a warning when averaging is over the share for
// so long that rounds start only at the pacer's floor (CpuSharePacer::kFloorEvery).

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>

#include "learner/cpu_share_pacer.hpp"

namespace gridtrain::learner {

// Whether a trainer with these settings paces the node's rounds: every_steps > 0, or cpu_share below 1 with the
// averaging's CPU clock to pace by. The node must start rounds only when allowed exactly when this holds: a node told
// to wait for allowances that never come would never average.
inline bool paces_rounds(int every_steps, double cpu_share, bool has_averaging_cpu) {
  return every_steps > 0 || (cpu_share > 0 && cpu_share < 1 && has_averaging_cpu);
}

class RoundPacing {
 public:
  // `averaging_cpu`: averaging's CPU time in all (the data plane's and the actors' threads, and the pulls' apply on
  // the training thread where the store defers them); empty where there is none. `rounds`: rounds completed on the
  // node's lines in all; may be empty (then only time spaces the allowances).
  RoundPacing(int every_steps, double cpu_share, std::function<std::chrono::nanoseconds()> averaging_cpu,
              std::function<std::uint64_t()> rounds)
      : every_(every_steps > 0 ? static_cast<std::uint64_t>(every_steps) : 0),
        averaging_cpu_(std::move(averaging_cpu)),
        rounds_(std::move(rounds)) {
    if (!every_ && paces_rounds(0, cpu_share, static_cast<bool>(averaging_cpu_))) pacer_.emplace(cpu_share);
  }

  // The warnings it logged that rounds start only at the pacer's floor.
  std::uint64_t floor_warnings() const { return floor_warnings_; }

  // Whether it ever allows a round (paces_rounds).
  bool active() const { return every_ > 0 || pacer_.has_value(); }

  // The learner's step number `steps` (counted from 1) took `step`, wall time since the end of the step before:
  // true when one more round may start.
  bool after_step(std::uint64_t steps, std::chrono::nanoseconds step) {
    if (every_) return steps % every_ == 0;
    if (!pacer_) return false;
    const std::uint64_t rounds = rounds_ ? rounds_() : 0;
    since_read_ += step;
    if (rounds != rounds_at_read_ || since_read_ >= kClockReadEvery) {
      averaging_total_ = averaging_cpu_();
      rounds_at_read_ = rounds;
      since_read_ = std::chrono::nanoseconds(0);
    }
    const bool allowed = pacer_->after_step(step, averaging_total_, rounds);
    if (const std::uint64_t floors = pacer_->floor_allowances(); floors != floors_seen_) {
      floors_seen_ = floors;  // this allowance was the floor's
      if (floors % kFloorWarnEvery == 1) warn_floor();
    }
    return allowed;
  }

  // How often the averaging's clock is read, in training time, where no round completed since the last read (a
  // round's end is read at once). A read is a system call per thread counted (about 10 us for a process's 8
  // threads on a virtual machine): after every 1 ms PyTorch step it was 1% of the step. What a read does not see
  // yet the next one does.
  static constexpr std::chrono::nanoseconds kClockReadEvery = std::chrono::milliseconds(2);
  // The floor's warning (CpuSharePacer::kFloorEvery) is logged at its first allowance and every this many after.
  static constexpr std::uint64_t kFloorWarnEvery = 30;

 private:
  void warn_floor() {
    ++floor_warnings_;
    spdlog::warn("averaging is over allreduce.cpu_share ({}) by {:.0f} ms of CPU: its lines start a round only at the "
                 "floor, one per {} s of training ({} so far). Either a round costs more than the share allows, "
                 "or something else keeps the node's actor threads busy",
                 pacer_->share(), pacer_->ahead_ns() / 1e6,
                 std::chrono::duration_cast<std::chrono::seconds>(CpuSharePacer::kFloorEvery).count(),
                 pacer_->floor_allowances());
  }

  std::uint64_t every_;
  std::function<std::chrono::nanoseconds()> averaging_cpu_;
  std::function<std::uint64_t()> rounds_;
  std::optional<CpuSharePacer> pacer_;
  std::uint64_t floors_seen_ = 0;  // the pacer's floor_allowances() at the last look
  std::uint64_t floor_warnings_ = 0;
  std::chrono::nanoseconds averaging_total_{0};  // at the last read
  std::uint64_t rounds_at_read_ = 0;
  std::chrono::nanoseconds since_read_{kClockReadEvery};  // the first step reads
};

}  // namespace gridtrain::learner
