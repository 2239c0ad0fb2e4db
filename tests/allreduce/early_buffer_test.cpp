#include <doctest/doctest.h>

#include <vector>

#include "allreduce/early_buffer.hpp"

namespace gridtrain::allreduce {
namespace {

RoundKey key(std::uint64_t version, std::uint64_t round) { return {1, version, 0, 0, round}; }

std::vector<int> release(EarlyBuffer<int>& b, std::uint64_t version, std::size_t expected_drops = 0) {
  std::size_t dropped = 99;
  auto out = b.release(1, version, dropped);
  CHECK(dropped == expected_drops);
  return out;
}

}  // namespace

TEST_CASE("an early buffer releases its messages for their StartLine, in round order and arrival order") {
  EarlyBuffer<int> b(3, 100);
  CHECK(b.hold(key(2, 1), 4, 10) == 0);
  CHECK(b.hold(key(2, 0), 4, 20) == 0);
  CHECK(b.hold(key(2, 1), 4, 11) == 0);
  CHECK(release(b, 1).empty());  // an older StartLine: kept for their own
  CHECK(release(b, 2) == std::vector<int>{20, 10, 11});
  CHECK(b.size() == 0);
  CHECK(b.cost() == 0);
}

TEST_CASE("an early buffer holds one line version: a newer one supersedes it, an older one is dropped") {
  EarlyBuffer<int> b(3, 100);
  b.hold(key(2, 0), 1, 1);
  b.hold(key(2, 1), 1, 2);
  CHECK(b.hold(key(1, 0), 1, 3) == 1);  // older than what is held
  CHECK(b.hold(key(3, 0), 1, 4) == 2);  // newer: both of version 2 go
  CHECK(release(b, 4, 1).empty());      // a StartLine newer than version 3: it is stale now
  CHECK(b.size() == 0);
}

TEST_CASE("an early buffer keeps the newest rounds, never the round being filled, within its budget") {
  EarlyBuffer<int> b(2, 10);
  b.hold(key(1, 0), 4, 1);
  b.hold(key(1, 1), 4, 2);
  CHECK(b.hold(key(1, 2), 4, 3) == 1);  // three rounds: round 0, the oldest, goes
  CHECK(b.hold(key(1, 0), 1, 4) == 1);  // older than every held round, no room: itself
  CHECK(b.hold(key(1, 2), 4, 5) == 1);  // over the cost: round 1 goes, round 2 (being filled) stays whole
  CHECK(b.rounds() == 1);
  CHECK(b.cost() == 8);
  CHECK(b.hold(key(1, 2), 4, 6) == 1);  // its own round alone over the budget: itself
  CHECK(release(b, 1) == std::vector<int>{3, 5});
}

TEST_CASE("an early buffer counts an empty message as costing one, so a flood of them stays bounded") {
  EarlyBuffer<int> b(16, 100);
  std::size_t dropped = 0;
  for (int i = 0; i < 10000; ++i) dropped += b.hold(key(1, 0), 0, i);
  CHECK(b.size() == 100);
  CHECK(dropped == 9900);
}

}  // namespace gridtrain::allreduce
