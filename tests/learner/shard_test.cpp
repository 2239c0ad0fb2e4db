#include "learner/shard.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

using gridtrain::config::ShardMethod;
using gridtrain::config::ShardMode;
using gridtrain::learner::Dataset;
using gridtrain::learner::Shard;
using gridtrain::learner::shard_indices;
using gridtrain::learner::take_shard;

TEST_CASE("node shards cover every sample exactly once, with sizes within 1, for both methods") {
  for (ShardMethod method : {ShardMethod::contiguous, ShardMethod::permutation}) {
    for (std::size_t samples : {0, 1, 2, 7, 10, 97, 1000}) {
      for (std::size_t count = 1; count <= 9; ++count) {
        CAPTURE(static_cast<int>(method));
        CAPTURE(samples);
        CAPTURE(count);
        std::vector<int> seen(samples, 0);
        std::size_t smallest = samples, largest = 0;
        for (std::size_t index = 0; index < count; ++index) {
          const auto mine = shard_indices(samples, Shard{index, count, ShardMode::node, method, 42});
          CHECK(std::is_sorted(mine.begin(), mine.end()));
          for (std::size_t i : mine) {
            REQUIRE(i < samples);
            ++seen[i];
          }
          smallest = std::min(smallest, mine.size());
          largest = std::max(largest, mine.size());
        }
        CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
        CHECK(largest - smallest <= 1);
      }
    }
  }
}

TEST_CASE("contiguous shards are consecutive index ranges, the first ones one larger") {
  CHECK(shard_indices(10, Shard{0, 3}) == std::vector<std::size_t>{0, 1, 2, 3});
  CHECK(shard_indices(10, Shard{1, 3}) == std::vector<std::size_t>{4, 5, 6});
  CHECK(shard_indices(10, Shard{2, 3}) == std::vector<std::size_t>{7, 8, 9});
}

TEST_CASE("permutation shards depend only on the shared seed, the same on every run and platform") {
  const Shard a{1, 3, ShardMode::node, ShardMethod::permutation, 7};
  CHECK(shard_indices(20, a) == shard_indices(20, a));
  // Pinned (SplitMix64, Lemire bounded draws, Fisher-Yates, computed independently): nodes of different builds
  // must agree on who holds which sample.
  CHECK(shard_indices(20, a) == std::vector<std::size_t>{1, 4, 6, 8, 11, 12, 15});
  Shard other_seed = a;
  other_seed.seed = 8;
  CHECK(shard_indices(20, other_seed) != shard_indices(20, a));
  Shard contiguous = a;
  contiguous.method = ShardMethod::contiguous;
  CHECK(shard_indices(20, contiguous) != shard_indices(20, a));
}

TEST_CASE("shard mode none gives every node all the samples") {
  for (std::size_t index = 0; index < 4; ++index) {
    const auto all = shard_indices(5, Shard{index, 4, ShardMode::none, ShardMethod::permutation, 3});
    CHECK(all == std::vector<std::size_t>{0, 1, 2, 3, 4});
  }
}

TEST_CASE("take_shard copies the shard's samples and labels, keeping the sample shape") {
  Dataset full;
  full.count = 5;
  full.sample_shape = {1, 1, 2};
  full.sample_floats = 2;
  full.classes = 10;
  full.images = {0, 0.5f, 1, 1.5f, 2, 2.5f, 3, 3.5f, 4, 4.5f};
  full.labels = {9, 8, 7, 6, 5};

  const Dataset second = take_shard(full, Shard{1, 2});  // samples 3 and 4
  CHECK(second.count == 2);
  CHECK(second.sample_shape == full.sample_shape);
  CHECK(second.sample_floats == 2);
  CHECK(second.classes == 10);
  CHECK(second.images == std::vector<float>{3, 3.5f, 4, 4.5f});
  CHECK(second.labels == std::vector<std::int32_t>{6, 5});

  const Shard perm{0, 2, ShardMode::node, ShardMethod::permutation, 11};
  const Dataset shuffled = take_shard(full, perm);
  const auto mine = shard_indices(5, perm);
  REQUIRE(shuffled.count == mine.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    CHECK(shuffled.labels[i] == full.labels[mine[i]]);
    CHECK(shuffled.images[2 * i] == full.images[2 * mine[i]]);
    CHECK(shuffled.images[2 * i + 1] == full.images[2 * mine[i] + 1]);
  }

  const Dataset everything = take_shard(full, Shard{1, 2, ShardMode::none});
  CHECK(everything.images == full.images);
  CHECK(everything.labels == full.labels);
}
