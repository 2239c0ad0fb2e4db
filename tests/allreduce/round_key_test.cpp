#include <doctest/doctest.h>

#include "allreduce/round_key.hpp"

using gridtrain::allreduce::key_order;
using gridtrain::allreduce::KeyOrder;
using gridtrain::allreduce::RoundKey;

TEST_CASE("round keys order by epoch, then layout version, then round") {
  const RoundKey ours{.epoch = 2, .layout_version = 5, .dim = 1, .line = 3, .round = 10};
  auto with = [&](std::uint64_t epoch, std::uint64_t layout, std::uint64_t round) {
    RoundKey k = ours;
    k.epoch = epoch;
    k.layout_version = layout;
    k.round = round;
    return key_order(k, ours);
  };
  CHECK(with(2, 5, 10) == KeyOrder::same);
  CHECK(with(2, 5, 9) == KeyOrder::older);
  CHECK(with(2, 5, 11) == KeyOrder::newer);
  CHECK(with(2, 4, 99) == KeyOrder::older);  // an older layout is older whatever its round
  CHECK(with(2, 6, 0) == KeyOrder::newer);
  CHECK(with(1, 99, 99) == KeyOrder::older);  // an older epoch is older whatever follows
  CHECK(with(3, 0, 0) == KeyOrder::newer);
}

TEST_CASE("a round key of another dim or line is foreign, not older or newer") {
  const RoundKey ours{.epoch = 2, .layout_version = 5, .dim = 1, .line = 3, .round = 10};
  RoundKey other_line = ours;
  other_line.line = 4;
  RoundKey other_dim = ours;
  other_dim.dim = 0;
  RoundKey other_line_newer = other_line;
  other_line_newer.round = 11;
  CHECK(key_order(other_line, ours) == KeyOrder::foreign);
  CHECK(key_order(other_dim, ours) == KeyOrder::foreign);
  CHECK(key_order(other_line_newer, ours) == KeyOrder::foreign);
}
