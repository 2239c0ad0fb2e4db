#pragma once
// RoundPacing: when a training node lets its lines start one more round. Once every allreduce.every_steps learner
// steps; or, with every_steps 0 and cpu_share f below 1, when the node's averaging has used no more than f of the
// training time (learner/cpu_share_pacer.hpp). The Trainer asks it after each of its steps; the PyTorch front end's
// averager after each of the user's optimizer steps. With neither (every_steps 0, f = 1) it never allows one, and
// the node's lines run rounds back to back without asking.

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
  // `averaging_cpu`: the node's averaging CPU time in all (its data plane's thread); empty where there is none.
  RoundPacing(int every_steps, double cpu_share, std::function<std::chrono::nanoseconds()> averaging_cpu)
      : every_(every_steps > 0 ? static_cast<std::uint64_t>(every_steps) : 0),
        averaging_cpu_(std::move(averaging_cpu)) {
    if (!every_ && paces_rounds(0, cpu_share, static_cast<bool>(averaging_cpu_))) pacer_.emplace(cpu_share);
  }

  // Whether it ever allows a round (paces_rounds).
  bool active() const { return every_ > 0 || pacer_.has_value(); }

  // The learner's step number `steps` (counted from 1) took `step`, wall time since the end of the step before:
  // true when one more round may start.
  bool after_step(std::uint64_t steps, std::chrono::nanoseconds step) {
    if (every_) return steps % every_ == 0;
    return pacer_ && pacer_->after_step(step, averaging_cpu_());
  }

 private:
  std::uint64_t every_;
  std::function<std::chrono::nanoseconds()> averaging_cpu_;
  std::optional<CpuSharePacer> pacer_;
};

}  // namespace gridtrain::learner
