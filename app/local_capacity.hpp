#pragma once
// How many node processes this machine can hold for `gridnode demo` and `gridnode chaos`, which start them all
// here: asked before the first one starts, so that a typo such as --nodes 100000 is refused at once rather than
// spawning processes until the machine gives out.

#include <string>

#include "base/result.hpp"

namespace gridtrain::app {

// Per core: 64 demo processes ran on 2 cores (each node's heartbeats, reports and rounds share the cores with its
// learner; beyond that the failure detector's 1 s is at risk).
inline constexpr int kNodesPerCore = 32;
// Per node: the demo's MLP node held about 120 MB resident (the Fashion-MNIST arrays, the model, its Rounds and
// CAF); this allows for more.
inline constexpr long long kBytesPerNode = 200LL << 20;

struct LocalCapacity {
  int cores = 1;
  long long available_bytes = 0;  // MemAvailable; 0 where it cannot be read (then memory does not limit)
  int by_cores() const { return cores * kNodesPerCore; }
  int by_memory() const;
  int limit() const;
};

// This machine's: its online cores and /proc/meminfo's MemAvailable.
LocalCapacity local_capacity();

// Whether `nodes` processes fit, or an error for `command` that says the limit and why.
Status fits_here(const std::string& command, int nodes, const LocalCapacity& capacity = local_capacity());

}  // namespace gridtrain::app
