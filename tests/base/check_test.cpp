// Violated preconditions abort with their message, in every build.

#include "base/check.hpp"

#include <doctest/doctest.h>

#include "base/result.hpp"
#include "tests/base/run_in_child.hpp"

using gridtrain::testing::run_in_child;

TEST_CASE("a violated precondition prints what was violated and aborts") {
  const auto end = run_in_child([] { gridtrain::precondition_violated("the answer is 42"); });
  CHECK(end.aborted);
  CHECK(end.stderr_text == "gridtrain: precondition violated: the answer is 42\n");
}

TEST_CASE("a Result accessed against its state prints what it carried and aborts") {
  const auto end = run_in_child([] {
    gridtrain::Result<int> failed = gridtrain::Error{.key = "learner.batch", .message = "expected >= 1"};
    (void)failed.value();
  });
  CHECK(end.aborted);
  CHECK(end.stderr_text ==
        "gridtrain: precondition violated: a Result accessed against its state: learner.batch: expected >= 1\n");
}

TEST_CASE("a child that returns is no abort") {
  const auto end = run_in_child([] {});
  CHECK_FALSE(end.aborted);
  CHECK(end.stderr_text.empty());
}
