#include "base/thread_cpu.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace gridtrain::base {

namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

// Spins until the calling thread has used `cpu` of CPU time.
void burn(nanoseconds cpu) {
  const nanoseconds until = this_thread_cpu() + cpu;
  volatile std::uint64_t x = 0;
  while (this_thread_cpu() < until) x = x + 1;
}

}  // namespace

TEST_CASE("ThreadClocks counts what its threads use, while they run and after they leave, and nothing else") {
  ThreadClocks clocks;
  CHECK(clocks.total() == nanoseconds(0));
  std::atomic<int> phase{0};
  std::thread member([&] {
    clocks.enter();
    burn(milliseconds(30));
    phase = 1;
    while (phase.load() != 2) std::this_thread::sleep_for(milliseconds(1));
    clocks.leave();
    phase = 3;
    burn(milliseconds(30));  // after it left: not counted
  });
  while (phase.load() != 1) std::this_thread::sleep_for(milliseconds(1));
  CHECK(clocks.size() == 1);
  const nanoseconds running = clocks.total();
  CHECK(running >= milliseconds(30));
  burn(milliseconds(30));  // the caller is no member: not counted
  phase = 2;
  member.join();
  CHECK(clocks.size() == 0);
  const nanoseconds left = clocks.total();
  CHECK(left >= running);                   // never goes back when a thread leaves
  CHECK(left < running + milliseconds(25));  // neither the caller's burn nor the member's after it left
  clocks.leave();                           // a thread that never entered: nothing changes
  CHECK(clocks.total() == left);
}

TEST_CASE("a thread's clock reads its own CPU time, not the wall's") {
  const nanoseconds before = this_thread_cpu();
  std::this_thread::sleep_for(milliseconds(50));
  CHECK(this_thread_cpu() - before < milliseconds(25));
  burn(milliseconds(20));
  CHECK(this_thread_cpu() - before >= milliseconds(20));
}

}  // namespace gridtrain::base
