#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "allreduce/quorum.hpp"

using gridtrain::allreduce::quorum;

TEST_CASE("quorum is ceil(theta * n) on a table of thresholds and line sizes") {
  struct Row {
    double theta;
    std::uint32_t n;
    std::uint32_t expected;
  };
  const Row table[] = {
      {1.0, 1, 1},  {1.0, 16, 16}, {0.5, 4, 2},  {0.5, 5, 3},  {0.7, 10, 7}, {0.7, 3, 3},
      {0.6, 5, 3},  {0.3, 10, 3},  {0.9, 10, 9}, {0.1, 10, 1}, {0.2, 5, 1},  {0.75, 4, 3},
      {0.8, 5, 4},  {0.8, 4, 4},   {0.25, 3, 1}, {0.99, 100, 99}, {0.51, 100, 51}, {0.7, 1000, 700},
  };
  for (const Row& row : table) {
    CAPTURE(row.theta);
    CAPTURE(row.n);
    CHECK(quorum(row.theta, row.n) == row.expected);
  }
}

TEST_CASE("quorum of a threshold that makes theta * n an integer is that integer, despite float error") {
  // Thresholds as a config file writes them (one or two decimals), over many line sizes.
  for (std::uint32_t n = 1; n <= 1000; ++n) {
    for (std::uint32_t hundredths = 1; hundredths <= 100; ++hundredths) {
      const double theta = hundredths / 100.0;
      const std::uint64_t exact = std::uint64_t{hundredths} * n;  // theta * n * 100, exactly
      const auto expected = static_cast<std::uint32_t>((exact + 99) / 100);
      const std::uint32_t got = quorum(theta, n);
      if (got != expected) {
        CAPTURE(theta);
        CAPTURE(n);
        CHECK(got == expected);
      }
    }
    for (std::uint32_t k = 1; k <= n && n <= 100; ++k) {
      const double theta = static_cast<double>(k) / n;  // k/n itself, e.g. 1/3
      if (quorum(theta, n) != k) {
        CAPTURE(k);
        CAPTURE(n);
        CHECK(quorum(theta, n) == k);
      }
    }
  }
}

TEST_CASE("quorum is never 0, and never more than n") {
  CHECK(quorum(0.0, 1) == 1);
  CHECK(quorum(0.0, 16) == 1);
  CHECK(quorum(-0.5, 7) == 1);
  CHECK(quorum(1e-12, 7) == 1);
  CHECK(quorum(0.01, 3) == 1);
  CHECK(quorum(1.5, 7) == 7);
  CHECK(quorum(std::numeric_limits<double>::infinity(), 7) == 7);
  CHECK(quorum(std::nan(""), 7) == 7);
  CHECK(quorum(0.5, std::numeric_limits<std::uint32_t>::max()) == 2147483648u);
}

TEST_CASE("quorum of nothing is nothing") {
  CHECK(quorum(0.0, 0) == 0);
  CHECK(quorum(0.5, 0) == 0);
  CHECK(quorum(1.0, 0) == 0);
}
