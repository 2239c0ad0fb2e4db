#pragma once
// SplitMix64 (Steele, Lea & Flood 2014), the learner's one generator where a draw must be the same on every
// platform and standard library: the initial parameters (learner/init.cpp) and the minibatch order
// (learner/learner.cpp). Internal to the learner.

#include <cstdint>

namespace gridtrain::learner {

// The next 64 bits of the stream whose state is `state`, which it advances.
inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace gridtrain::learner
