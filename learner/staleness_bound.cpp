#include "learner/staleness_bound.hpp"

#include <spdlog/spdlog.h>

#include <thread>

namespace gridtrain::learner {

StalenessBound::StalenessBound(int bound, std::function<std::uint64_t()> rounds, std::function<bool()> averaging,
                               std::chrono::milliseconds max_wait)
    : bound_(bound > 0 && rounds && averaging ? static_cast<std::uint64_t>(bound) : 0),
      rounds_(std::move(rounds)),
      averaging_(std::move(averaging)),
      max_wait_(max_wait) {}

bool StalenessBound::reached(std::uint64_t steps) {
  if (bound_ == 0) return false;
  const std::uint64_t rounds = rounds_();
  if (!primed_ || rounds != rounds_seen_) {
    primed_ = true;
    given_up_ = false;
    rounds_seen_ = rounds;
    steps_at_round_ = steps;
    return false;
  }
  return !given_up_ && steps - steps_at_round_ >= bound_ && averaging_();
}

std::chrono::nanoseconds StalenessBound::wait(std::uint64_t steps, const std::function<bool()>& stop) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  bool ended = false;
  while (!ended && clock::now() - start < max_wait_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ended = rounds_() != rounds_seen_ || !averaging_() || (stop && stop());
  }
  given_up_ = !ended;
  if (!ended && ++gave_up_ == 1)
    spdlog::warn("no round completed within {} ms of reaching allreduce.staleness_bound ({} steps): training goes on "
                 "without waiting until a round completes again (said once)",
                 max_wait_.count(), bound_);
  rounds_seen_ = rounds_();
  steps_at_round_ = steps;
  return clock::now() - start;
}

}  // namespace gridtrain::learner
