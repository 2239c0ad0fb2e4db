#include "base/failure_streak.hpp"

#include <doctest/doctest.h>

namespace gridtrain {

using Say = FailureStreak::Say;
using std::chrono::seconds;

TEST_CASE("a repeated failure is said when it starts, once a period while it lasts, and when it ends") {
  FailureStreak streak(seconds(60));
  const FailureStreak::Clock::time_point t0{};
  CHECK(streak.succeeded() == Say::nothing);  // nothing failed yet
  CHECK(streak.failed(t0 + seconds(1)) == Say::first);
  CHECK(streak.failed(t0 + seconds(2)) == Say::nothing);
  CHECK(streak.failed(t0 + seconds(60)) == Say::nothing);
  CHECK(streak.failed(t0 + seconds(61)) == Say::again);  // a period after it was first said
  CHECK(streak.failures() == 4);
  CHECK(streak.failed(t0 + seconds(62)) == Say::nothing);
  CHECK(streak.succeeded() == Say::recovered);
  CHECK(streak.failures() == 5);
  CHECK(streak.succeeded() == Say::nothing);  // said once

  // The next failure starts a new streak, said at once however soon it comes.
  CHECK(streak.failed(t0 + seconds(63)) == Say::first);
  CHECK(streak.failures() == 1);
}

}  // namespace gridtrain
