#pragma once
// Shard: which part of the training set a node trains on.
//
// With ShardMode::node the samples are split among `count` nodes so that every sample is in exactly one shard
// and shard sizes differ by at most 1: either contiguous ranges by index, or ranges of one permutation of all
// samples. The permutation is drawn from the run's seed, which every node shares (it must be the same on every
// node, or the shards would overlap); the node's index picks its range. With ShardMode::none every node sees all
// the data.
//
// Membership is elastic, but a shard is not: a node chooses it once, from its rank and the cluster size when it
// starts training, and keeps it. Re-sharding on every join or leave would move data and restart epochs across
// the cluster; instead, after membership changes, shards may overlap or leave some samples to nobody until a
// restart. Elastic averaging still mixes what each node has learned from its own shard.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "config/enums.hpp"
#include "learner/dataset.hpp"

namespace gridtrain::learner {

struct Shard {
  std::size_t index = 0;  // this node's rank among the nodes at start; REQUIRES: index < count
  std::size_t count = 1;  // the number of nodes at start; REQUIRES: count >= 1
  config::ShardMode mode = config::ShardMode::node;
  config::ShardMethod method = config::ShardMethod::contiguous;
  std::uint64_t seed = 0;  // the run's seed (learner.seed), for ShardMethod::permutation
};

// The indices of the samples, out of `samples`, in `shard`, ascending. Deterministic on every platform: the
// permutation uses its own generator, not the standard library's distributions.
std::vector<std::size_t> shard_indices(std::size_t samples, const Shard& shard);

// The samples of `full` in `shard`, as a copy (or `full` itself, moved, for ShardMode::none).
Dataset take_shard(Dataset full, const Shard& shard);

}  // namespace gridtrain::learner
