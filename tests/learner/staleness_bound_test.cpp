// StalenessBound (allreduce.staleness_bound): when a learner must wait for a round, and what ends the wait. The
// rounds' count and the line are counters the test moves, as the data plane's would move.

#include "learner/staleness_bound.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <memory>

namespace {

using gridtrain::learner::StalenessBound;
using namespace std::chrono_literals;

struct Line {
  std::shared_ptr<std::uint64_t> rounds = std::make_shared<std::uint64_t>(0);
  std::shared_ptr<bool> peers = std::make_shared<bool>(true);
  StalenessBound bound(int steps, std::chrono::milliseconds max_wait = 10s) const {
    return StalenessBound(
        steps, [r = rounds] { return *r; }, [p = peers] { return *p; }, max_wait);
  }
  // A bound of one step, reached at step 2.
  StalenessBound reached_at_2() const {
    auto b = bound(1);
    b.reached(1);
    REQUIRE(b.reached(2));
    return b;
  }
};

}  // namespace

TEST_CASE("a learner reaches its staleness bound that many steps after the last round it saw complete") {
  Line line;
  auto bound = line.bound(3);
  CHECK_FALSE(bound.reached(1));  // the first step sees the count as it is
  CHECK_FALSE(bound.reached(2));
  CHECK_FALSE(bound.reached(3));
  CHECK(bound.reached(4));
  ++*line.rounds;  // a round completed: counted from here
  CHECK_FALSE(bound.reached(5));
  CHECK_FALSE(bound.reached(7));
  CHECK(bound.reached(8));
}

TEST_CASE("a bound of 0, or no line with a peer, never makes the learner wait") {
  Line line;
  auto none = line.bound(0);
  for (std::uint64_t s = 1; s < 100; ++s) CHECK_FALSE(none.reached(s));
  auto alone = line.bound(2);
  *line.peers = false;
  for (std::uint64_t s = 1; s < 100; ++s) CHECK_FALSE(alone.reached(s));
  *line.peers = true;  // peers came: the steps since the last round count at once
  CHECK(alone.reached(100));
}

TEST_CASE("a wait at the bound ends when a round completes, the line goes, or the caller stops it") {
  SUBCASE("a round") {
    Line line;
    auto bound = line.reached_at_2();
    int polls = 0;
    bound.wait(2, [&] {
      if (++polls == 5) ++*line.rounds;  // the data plane completes a round meanwhile
      return false;
    });
    CHECK(bound.gave_up() == 0);
    CHECK(polls == 5);
    CHECK_FALSE(bound.reached(2));  // counted from the step that waited
    CHECK(bound.reached(3));
  }
  SUBCASE("the line") {
    Line line;
    auto bound = line.reached_at_2();
    bound.wait(2, [&] { return (*line.peers = false); });
    CHECK(bound.gave_up() == 0);
  }
  SUBCASE("the caller") {
    Line line;
    auto bound = line.reached_at_2();
    int polls = 0;
    bound.wait(2, [&] { return ++polls == 3; });
    CHECK(polls == 3);
    CHECK(bound.gave_up() == 0);
  }
}

TEST_CASE("a wait at the bound that no round ends gives up after its longest; no wait again until a round completes") {
  Line line;
  auto bound = line.bound(2, 20ms);
  bound.reached(1);
  REQUIRE(bound.reached(3));
  const auto waited = bound.wait(3, nullptr);
  CHECK(waited >= 20ms);
  CHECK(bound.gave_up() == 1);
  for (std::uint64_t step = 4; step < 100; ++step) CHECK_FALSE(bound.reached(step));
  ++*line.rounds;  // the line completes rounds again: the bound holds again
  CHECK_FALSE(bound.reached(100));
  CHECK_FALSE(bound.reached(101));
  CHECK(bound.reached(102));
}
