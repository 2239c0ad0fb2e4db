#pragma once
// A failure that repeats, said once rather than every time: when it starts, then at most once per period while it
// lasts (with how many times it failed), and once when it ends. A node that checkpoints every few seconds onto a
// full disk logged the same error at each attempt, several times a second, into a journal on that same disk.
// Pure: the caller gives the time, so that its cases run without waiting.

#include <chrono>
#include <cstdint>

namespace gridtrain {

class FailureStreak {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Say : std::uint8_t {
    nothing,    // keep quiet
    first,      // a streak started: say what failed
    again,      // a period has passed since it was last said: say it again, with failures()
    recovered,  // the streak ended: say so, with failures()
  };

  explicit FailureStreak(Clock::duration period) : period_(period) {}

  Say failed(Clock::time_point now) {
    if (ended_) failures_ = 0, ended_ = false;  // a new streak
    ++failures_;
    if (failures_ == 1 || now - said_ >= period_) {
      said_ = now;
      return failures_ == 1 ? Say::first : Say::again;
    }
    return Say::nothing;
  }

  // After a recovered, failures() still holds the ended streak's count until the next failure starts a new one.
  Say succeeded() {
    if (failures_ == 0 || ended_) return Say::nothing;
    ended_ = true;
    return Say::recovered;
  }

  // Failures in the current streak (or the last one, once it ended).
  std::uint64_t failures() const { return failures_; }

 private:
  Clock::duration period_;
  Clock::time_point said_{};
  std::uint64_t failures_ = 0;
  bool ended_ = false;
};

}  // namespace gridtrain
