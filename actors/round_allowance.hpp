#pragma once
// RoundAllowance: the rounds a training node's learner lets its LineMasters start (allreduce.every_steps, or
// cpu_share: learner/round_pacing.hpp), shared by the training thread, which grants them, and the node's
// LineMasters, which take them.
//
// A grant was a message to every LineMaster, a dozen per grant: a node whose lines another node masters sent them
// a hundred times a second for nothing, and each woke an actor thread that preempted training (BENCHMARKS.md, "The
// PyTorch averager's cost to the loop"). Now a grant is an atomic add, and a message wakes a LineMaster only when
// it waits for a grant: a master that could start a round and has no budget left says so (wait(dim)) before it
// stops, and the grant that finds it waiting names it. Every LineMaster takes every grant (one more round for each
// of the node's lines), with a cursor of its own.
//
//   training thread:  if (auto waiting = allowance.grant(1)) send the node (allow_rounds_atom, waiting): it wakes
//                     those LineMasters
//   LineMaster:       budget += allowance.take(dim, taken); if none: wait(dim), then take() once more

#include <array>
#include <atomic>
#include <cstdint>

#include "grid/cube.hpp"

namespace gridtrain::actors {

class RoundAllowance {
 public:
  // `rounds` more for each of the node's lines (every dimension). Returns the LineMasters that wait for a grant, a
  // bit per dimension (0: none), which the caller wakes; each is returned once per wait().
  std::uint8_t grant(std::uint64_t rounds) {
    granted_all_.fetch_add(rounds);
    return waiting_.exchange(0);
  }
  // `rounds` more for the node's line in `dim` only (tests that run one dimension at a time). REQUIRES: dim < kDims.
  std::uint8_t grant(std::uint32_t dim, std::uint64_t rounds) {
    granted_[dim].fetch_add(rounds);
    return waiting_.exchange(0);
  }

  // The rounds granted to `dim` since `taken`, the caller's cursor, which it moves past them. (Both counts only
  // grow, so their sum read one after the other is a count the cursor may pass.)
  std::uint64_t take(std::uint32_t dim, std::uint64_t& taken) const {
    const std::uint64_t granted = granted_all_.load() + granted_[dim].load();
    const std::uint64_t fresh = granted - taken;
    taken = granted;
    return fresh;
  }

  // The LineMaster of `dim` has no round to start: the next grant asks for its wake-up. It must take() once more
  // after this, since a grant may have come just before (sequentially consistent: either that take() sees the
  // grant, or the grant sees the wait). REQUIRES: dim < kDims.
  void wait(std::uint32_t dim) { waiting_.fetch_or(static_cast<std::uint8_t>(1u << dim)); }

  static constexpr std::size_t kDims = grid::kMaxDims;
  static_assert(kDims <= 8, "a bit per dimension in a byte");

 private:
  std::atomic<std::uint64_t> granted_all_{0};             // grants to every line
  std::array<std::atomic<std::uint64_t>, kDims> granted_{};  // grants to one line
  std::atomic<std::uint8_t> waiting_{0};  // a bit per dimension whose LineMaster waits
};

}  // namespace gridtrain::actors
