#include "allreduce/quorum.hpp"

#include <cmath>

namespace gridtrain::allreduce {

std::uint32_t quorum(double theta, std::uint32_t n) {
  if (n == 0) return 0;
  if (std::isnan(theta) || theta >= 1.0) return n;
  if (theta <= 0.0) return 1;
  // theta (parsed from decimal) and theta * n each carry a relative error of about 1e-16. Shaving
  // off a relative 1e-12 (under 0.005 for any 32-bit n: far below the step of 1 between two
  // quorums) keeps ceil(0.7 * 10) at 7 instead of 8.
  const double scaled = theta * static_cast<double>(n);
  const double q = std::ceil(scaled * (1.0 - 1e-12));
  if (q > static_cast<double>(n)) return n;
  return static_cast<std::uint32_t>(q);
}

}  // namespace gridtrain::allreduce
