// RoundDeadlines: every deadline is met at its time, with a timer only where none set covers it.
#include <doctest/doctest.h>

#include <cstdint>

#include "actors/round_deadlines.hpp"

namespace gridtrain::testing {

namespace {

using Deadlines = actors::RoundDeadlines<std::uint64_t, int>;  // rounds, and a clock in whole milliseconds

}  // namespace

TEST_CASE("a round that ends before its deadline costs no timer beyond the one already set") {
  Deadlines d;
  // Rounds every 50 ms, each done 10 ms after it starts, deadlines 200 ms after the start.
  CHECK(d.add(0, 200) == 200);  // the first needs a timer
  d.remove(0);
  CHECK(d.add(1, 250) == std::nullopt);  // the timer for 200 comes first: it will see to 250
  d.remove(1);
  CHECK(d.add(2, 300) == std::nullopt);
  CHECK(d.timers() == 1);
  // The timer fires at 200: nothing is due; round 2 is still open, so a timer for its 300.
  auto due = d.fired(200, 200);
  CHECK(due.keys.empty());
  CHECK(due.arm == 300);
  d.remove(2);
  // It fires with nothing open: no timer after it.
  due = d.fired(300, 300);
  CHECK(due.keys.empty());
  CHECK_FALSE(due.arm.has_value());
  CHECK(d.timers() == 0);
  CHECK(d.empty());
}

TEST_CASE("each deadline is handed out once, at its time, in order") {
  Deadlines d;
  CHECK(d.add(0, 200) == 200);
  CHECK(d.add(1, 230) == std::nullopt);
  CHECK(d.add(2, 260) == std::nullopt);
  auto due = d.fired(200, 201);
  CHECK(due.keys == std::vector<std::uint64_t>{0});
  CHECK(due.arm == 230);
  // A late timer hands out every deadline passed by then.
  due = d.fired(230, 270);
  CHECK(due.keys == std::vector<std::uint64_t>{1, 2});
  CHECK_FALSE(due.arm.has_value());
  CHECK(d.empty());
}

TEST_CASE("an earlier deadline gets a timer of its own; a later one for the same round is not kept") {
  Deadlines d;
  CHECK(d.add(0, 200) == 200);
  // A round that asks to be looked at sooner (a probe for a late peer) than any timer set.
  CHECK(d.add(1, 120) == 120);
  CHECK(d.timers() == 2);
  // Its own later deadline: the earlier one counts; the round asks again if it wants more time.
  CHECK(d.add(1, 320) == std::nullopt);
  auto due = d.fired(120, 120);
  CHECK(due.keys == std::vector<std::uint64_t>{1});
  CHECK_FALSE(due.arm.has_value());  // round 0's 200 is covered by the timer set for it
  // Round 1 asks again, for later: the timer for 200 covers it only up to 200, then arms for it.
  CHECK(d.add(1, 260) == std::nullopt);
  due = d.fired(200, 200);
  CHECK(due.keys == std::vector<std::uint64_t>{0});
  CHECK(due.arm == 260);
  due = d.fired(260, 260);
  CHECK(due.keys == std::vector<std::uint64_t>{1});
  CHECK(d.timers() == 0);
}

TEST_CASE("a new line drops the rounds' deadlines, and the timers in flight stay known") {
  Deadlines d;
  CHECK(d.add(5, 200) == 200);
  d.clear();
  // Round 0 of the new line: the timer for 200 is still coming and covers it.
  CHECK(d.add(0, 180) == 180);  // earlier than it: a timer of its own
  CHECK(d.add(1, 400) == std::nullopt);
  auto due = d.fired(180, 180);
  CHECK(due.keys == std::vector<std::uint64_t>{0});
  CHECK_FALSE(due.arm.has_value());  // 200 is still coming
  due = d.fired(200, 200);  // the old line's timer: nothing of the old line is handed out
  CHECK(due.keys.empty());
  CHECK(due.arm == 400);
}

}  // namespace gridtrain::testing
