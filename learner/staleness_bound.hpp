#pragma once
// StalenessBound: allreduce.staleness_bound = s > 0 keeps a learner at most s steps past the last round completed on
// its node's lines. After each step the learner asks reached(); when it has, it lets one more round start (where it
// paces them) and calls wait(), which returns once a round completes, the node no longer averages (no line with a
// peer: a node alone never waits), the caller says stop, or kMaxStalenessWait went by (then training goes on without
// waiting until a round completes again: the line cannot complete one now, its peers cut off or gone, and waits of
// 10 s every s steps held a node whose line peers had all finished to 965 samples/s where they had run 15-19K; the
// first give-up is logged). Where a slow link is what limits the rounds, this trades the learner's speed for
// replicas that stay close; s = 0, the default, never waits. The Trainer (gridnode) and the PyTorch front end's
// step() both use it.

#include <chrono>
#include <cstdint>
#include <functional>

namespace gridtrain::learner {

// The longest one wait lasts: longer than a failover takes (2-5 s), so that replicas do not drift through one, and
// short enough that a line that cannot complete a round does not stop training.
inline constexpr std::chrono::seconds kMaxStalenessWait{10};

class StalenessBound {
 public:
  // `rounds`: rounds completed on the node's lines so far; `averaging`: whether the node has a line with a peer
  // now. Either empty, or bound 0: it never waits.
  StalenessBound(int bound, std::function<std::uint64_t()> rounds, std::function<bool()> averaging,
                 std::chrono::milliseconds max_wait = kMaxStalenessWait);

  // After the learner's step number `steps` (counted as the caller likes, increasing): whether it is `bound` steps
  // past the last round it saw complete, with a line to wait on.
  bool reached(std::uint64_t steps);
  // REQUIRES: reached(steps) just said so. Waits as above, polling every millisecond; `stop` may be empty.
  // Returns how long it waited.
  std::chrono::nanoseconds wait(std::uint64_t steps, const std::function<bool()>& stop);
  // Waits that gave up after max_wait, so far.
  std::uint64_t gave_up() const { return gave_up_; }

 private:
  std::uint64_t bound_;
  std::function<std::uint64_t()> rounds_;
  std::function<bool()> averaging_;
  std::chrono::milliseconds max_wait_;
  bool primed_ = false;           // rounds_seen_ and steps_at_round_ were set
  std::uint64_t rounds_seen_ = 0;  // the rounds' count at its last change
  std::uint64_t steps_at_round_ = 0;
  bool given_up_ = false;  // the last wait gave up, and no round completed since: no wait until one does
  std::uint64_t gave_up_ = 0;
};

}  // namespace gridtrain::learner
