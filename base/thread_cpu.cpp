#include "base/thread_cpu.hpp"

#include <algorithm>

namespace gridtrain::base {

std::chrono::nanoseconds thread_cpu(clockid_t clock) {
  timespec t{};
  if (clock_gettime(clock, &t) != 0) return std::chrono::nanoseconds(0);
  return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
}

std::chrono::nanoseconds this_thread_cpu() { return thread_cpu(CLOCK_THREAD_CPUTIME_ID); }

void ThreadClocks::enter() {
  clockid_t clock;
  if (pthread_getcpuclockid(pthread_self(), &clock) != 0) return;  // not counted: nothing else to do
  std::lock_guard<std::mutex> hold(mutex_);
  members_.push_back({pthread_self(), clock});
}

void ThreadClocks::leave() {
  const pthread_t self = pthread_self();
  std::lock_guard<std::mutex> hold(mutex_);  // read under the lock: total() sees the thread once, and never less
  const auto it = std::find_if(members_.begin(), members_.end(),
                               [&](const Member& m) { return pthread_equal(m.thread, self); });
  if (it == members_.end()) return;
  left_ += this_thread_cpu();
  members_.erase(it);
}

std::chrono::nanoseconds ThreadClocks::total() const {
  std::lock_guard<std::mutex> hold(mutex_);
  std::chrono::nanoseconds sum = left_;
  for (const Member& m : members_) sum += thread_cpu(m.clock);
  return sum;
}

std::size_t ThreadClocks::size() const {
  std::lock_guard<std::mutex> hold(mutex_);
  return members_.size();
}

}  // namespace gridtrain::base
