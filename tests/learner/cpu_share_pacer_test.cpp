// CpuSharePacer: averaging's CPU time held to its share of the learner's time, idle credit bounded, allowances
// spaced while no round completes (whatever the CPU clock does), and totals that start high or go back taken as no
// work.
#include "learner/cpu_share_pacer.hpp"
#include "learner/round_pacing.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <memory>

using gridtrain::learner::CpuSharePacer;
using namespace std::chrono_literals;

namespace {

// A node whose every allowed round costs `round_cost` of averaging CPU and completes at once, over `steps` learner
// steps of `step` each; the rounds allowed.
int run(CpuSharePacer& pacer, std::chrono::nanoseconds& averaging, int steps, std::chrono::nanoseconds step,
        std::chrono::nanoseconds round_cost) {
  std::uint64_t rounds = 0;
  for (int i = 0; i < steps; ++i) {
    if (pacer.after_step(step, averaging, rounds)) {
      ++rounds;
      averaging += round_cost;
    }
  }
  return static_cast<int>(rounds);
}

}  // namespace

TEST_CASE("while rounds cost almost nothing, every step may start one") {
  CpuSharePacer pacer(0.05);
  std::chrono::nanoseconds averaging{0};
  for (std::uint64_t rounds = 0; rounds < 100; ++rounds) {
    CHECK(pacer.after_step(1ms, averaging, rounds));
    averaging += 1us;  // the round it allowed ran
  }
}

TEST_CASE("while no round completes, one is allowed per 10 ms of training, not per step") {
  CpuSharePacer pacer(0.05);
  int allowed = 0;
  for (int i = 0; i < 1000; ++i) allowed += pacer.after_step(100us, 0ns, 0) ? 1 : 0;  // 100 ms of training
  CHECK(allowed == 10);
  // The actors' threads use a little CPU all the time (timers, heartbeats, the allowances' own messages): that is no
  // round, and allows no more.
  CpuSharePacer ticking(0.05);
  std::chrono::nanoseconds averaging{0};
  allowed = 0;
  for (int i = 0; i < 1000; ++i) {
    averaging += 1us;
    allowed += ticking.after_step(100us, averaging, 0) ? 1 : 0;
  }
  CHECK(allowed == 10);
}

TEST_CASE("a round's cost holds the next one back for cost / share of training") {
  CpuSharePacer pacer(0.1);
  std::chrono::nanoseconds averaging{0};
  CHECK(pacer.after_step(1ms, averaging, 0));
  averaging += 5ms;  // the round it allowed took 5 ms of CPU: the next waits for 50 ms of training
  int held = 0;
  while (!pacer.after_step(1ms, averaging, 1)) ++held;
  // 5 ms at 10% is 50 ms of training: the first step's and 48 held ones earn 4.9 ms, the next one the rest.
  CHECK(held == 48);
}

TEST_CASE("over a long run averaging takes its share of the learner's time, to within one round") {
  for (const double share : {0.01, 0.05, 0.2, 0.5}) {
    CAPTURE(share);
    CpuSharePacer pacer(share);
    std::chrono::nanoseconds averaging{0};
    const std::chrono::nanoseconds step = 700us, cost = 3ms;
    const int steps = 100000;
    const int rounds = run(pacer, averaging, steps, step, cost);
    const double training_ns = static_cast<double>(step.count()) * steps;
    const double used_ns = static_cast<double>(averaging.count());
    CHECK(used_ns <= share * training_ns + static_cast<double>(cost.count()));
    CHECK(used_ns >= share * training_ns - static_cast<double>(cost.count()));
    CHECK(rounds > 0);
    CHECK(pacer.floor_allowances() == 0);  // the share alone paces them
  }
}

TEST_CASE("threads that burn CPU with no round of ours asking still leave a round every 2 s of training") {
  // Once, CAF messages circled between two nodes for good and took a quarter of a core on the actors' threads,
  // which the clock counts: with no floor their lines ran no round again. 20 s of 1 ms steps, 250 us burnt in each.
  CpuSharePacer pacer(0.05);
  std::chrono::nanoseconds averaging{0};
  int allowed = 0;
  std::uint64_t rounds = 0;
  for (int i = 0; i < 20000; ++i) {
    averaging += 250us;
    if (pacer.after_step(1ms, averaging, rounds)) {
      ++allowed;
      ++rounds;
    }
  }
  CHECK(allowed == 10);
  CHECK(pacer.floor_allowances() == 9);  // the first step's is the share's: nothing was counted before it
  CHECK(pacer.ahead_ns() > 0);  // still over its share: the floor does not pretend otherwise
}

TEST_CASE("time without rounds earns at most a second's share of credit") {
  CpuSharePacer pacer(0.1);
  std::chrono::nanoseconds averaging{0};
  // An hour of training with no round run (no peers): the pacer allows rounds that are never started.
  for (int i = 0; i < 3600; ++i) CHECK(pacer.after_step(1s, averaging, 0));
  CHECK(pacer.ahead_ns() == doctest::Approx(-0.1e9));
  // Peers come: the round allowed last runs, and so does each one allowed after it, at 10 ms each. The credit
  // (0.1 s) pays for that one and 10 more, then the share holds.
  averaging += 10ms;
  std::uint64_t burst = 0;
  while (pacer.after_step(0ns, averaging, burst + 1)) {
    ++burst;
    averaging += 10ms;
    REQUIRE(burst < 1000);
  }
  CHECK(burst == 10);
}

TEST_CASE("averaging done before the first step, and a total that goes back, count as no work") {
  CpuSharePacer pacer(0.05);
  CHECK(pacer.after_step(1ms, 10s, 0));       // the data plane ran for a while before training started
  CHECK_FALSE(pacer.after_step(1ms, 1s, 0));  // a new data plane: its total starts again; no round since the last
  CHECK(pacer.ahead_ns() <= 0);               // allowance, which was 2 ms ago
  CHECK(pacer.after_step(10ms, 1s, 0));       // 10 ms on, one more
  CHECK_FALSE(pacer.after_step(1ms, 1s + 100ms, 1));  // 100 ms of new work is far beyond 5% of 3 ms
}

TEST_CASE("the pacing reads averaging's clock after each round and every 2 ms of training, not after every step") {
  auto reads = std::make_shared<int>(0);
  auto rounds = std::make_shared<std::uint64_t>(0);
  gridtrain::learner::RoundPacing pacing(
      0, 0.05,
      [reads] {
        ++*reads;
        return std::chrono::nanoseconds(0);
      },
      [rounds] { return *rounds; });
  for (std::uint64_t step = 1; step <= 1000; ++step) pacing.after_step(step, 100us);  // 100 ms of training
  CHECK(*reads == 50);  // the first step, then every 2 ms: steps 1, 21, ..., 981
  *reads = 0;
  for (std::uint64_t step = 1001; step <= 1010; ++step) {
    ++*rounds;  // a round completed before each of these steps
    pacing.after_step(step, 100us);
  }
  CHECK(*reads == 10);
}

TEST_CASE("the pacing warns when the floor starts the rounds: at its first allowance and every 30th after, only") {
  // A quarter of each 1 ms step burnt on the actors' threads, no round of ours: 70 s of training.
  auto burnt = std::make_shared<std::chrono::nanoseconds>(0);
  auto rounds = std::make_shared<std::uint64_t>(0);
  gridtrain::learner::RoundPacing pacing(0, 0.05, [burnt] { return *burnt; }, [rounds] { return *rounds; });
  int allowed = 0;
  for (std::uint64_t step = 1; step <= 70000; ++step) {
    *burnt += 250us;
    if (pacing.after_step(step, 1ms)) {
      ++allowed;
      ++*rounds;
    }
  }
  CHECK(allowed == 35);                 // the first step's, then the floor's 34
  CHECK(pacing.floor_warnings() == 2);  // the floor's 1st and 31st

  // A debt the share pays back within the floor's 2 s: one floor allowance, one warning, and the share's own
  // allowances after it warn of nothing.
  auto little = std::make_shared<std::chrono::nanoseconds>(0);
  gridtrain::learner::RoundPacing paying(0, 0.05, [little] { return *little; }, [rounds] { return *rounds; });
  for (std::uint64_t step = 1; step <= 2100; ++step) {
    *little += 90us;  // 40 us a step over the share: 80 ms behind by the floor's allowance
    if (paying.after_step(step, 1ms)) ++*rounds;
  }
  CHECK(paying.floor_warnings() == 1);
  allowed = 0;
  for (std::uint64_t step = 2101; step <= 20000; ++step) {
    if (paying.after_step(step, 1ms)) {
      ++allowed;
      ++*rounds;
    }
  }
  CHECK(allowed > 1000);  // the share's, each step or nearly, once the debt is paid
  CHECK(paying.floor_warnings() == 1);
}
