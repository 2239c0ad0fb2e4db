#pragma once

#include <cstdint>

namespace gridtrain::allreduce {

// Names one allreduce round; every message of the round carries it.
struct RoundKey {
  std::uint64_t epoch = 0;           // GridMaster epoch, raised on failover
  std::uint64_t layout_version = 0;  // raised on every membership change
  std::uint32_t dim = 0;             // grid dimension of the line
  std::uint64_t line = 0;            // line within that dimension
  std::uint64_t round = 0;           // round number on that line

  friend bool operator==(const RoundKey&, const RoundKey&) = default;
};

// Where an incoming key stands relative to the round we are running.
enum class KeyOrder : std::uint8_t {
  older,    // drop it: it belongs to a round we have left behind
  same,     // ours
  newer,    // the line has moved on: finish ours with what we have (BIDMach's catchUp)
  foreign,  // another dim or line: it should never have been routed here
};

// Orders by (epoch, layout_version, round), lexicographically, within one dim and line.
KeyOrder key_order(const RoundKey& incoming, const RoundKey& current);

}  // namespace gridtrain::allreduce
