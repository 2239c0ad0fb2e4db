#pragma once

#include <cstdint>

namespace gridtrain::allreduce {

// How a round decides that enough has arrived, for the reduce and for completion alike.
enum class QuorumMode : std::uint8_t {
  // BIDMach: go on as soon as ceil(theta * n) have arrived.
  fraction,
  // Wait for all n; once the caller says the quorum timeout has passed, ceil(theta * n) suffice.
  // This is the paper's own proposal (section 6.1.4), not what BIDMach shipped.
  timeout,
};

// How many arrivals out of n satisfy the threshold theta: ceil(theta * n), clamped to [1, n].
// - Never 0: BIDMach could compute a quorum of 0 and move on with nothing.
// - A product that is an integer in exact arithmetic is not pushed up by float error:
//   quorum(0.7, 10) == 7, although 0.7 * 10 is not exactly 7 in binary.
// - theta <= 0 gives 1, theta >= 1 gives n, NaN gives n (the strictest reading of a broken value).
// - quorum(theta, 0) == 0: there is nothing to wait for.
std::uint32_t quorum(double theta, std::uint32_t n);

}  // namespace gridtrain::allreduce
