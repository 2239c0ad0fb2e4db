#pragma once
// PeerPatience: which peers of a line a round should still wait for, learned from the rounds before.
//
// In quorum mode `timeout` a round that misses a peer waits for its deadline (the line idle for quorum_timeout_ms).
// A peer that stopped (SIGSTOP, a hung process, a cut link) until the failure detector takes it out then cost every
// round that whole wait, again and again: one of 4 probe nodes stopped took its line from 3,436 rounds in 4 s to 22.
// So a peer that went unheard for kSilentAfter rounds in a row (none of its frames counted in them) is silent: a
// round whose only missing parts are silent peers' no longer waits for them, and completes on its quorum as soon as
// everyone else's parts are in. A silent peer's frames still count when they come in time, and the first one that
// counts makes it a peer like the others again, waited for fully. A healthy line never has a silent peer, so its
// rounds stay exact.
//
// A peer that is merely slow (a throttled or overloaded process, a slower link) is never silent: its frames keep
// coming, each round waits for them, and the whole line runs at its pace (one of 4 stopped 20 ms of every 30 took
// the line's rounds from 2.1 ms to 6.8 ms). So each round's timing is learned too. A peer's hold-up in a round is
// how long the round waited for it alone: from the latest of the other peers' last parts to its own, less a slack
// of kLateSlackUs for a descheduled process; the whole round where its parts never came (the round was made to
// complete without them). A peer is late while its hold-ups, summed over the recent rounds, are more than
// kLateShare / (1 + kLateShare) of those rounds' time: the line would run more than 1 + kLateShare times as fast
// without it. Time, not rounds, is what counts: a peer stopped for 20 ms of every 30 holds up one round in six for
// 20 ms and lets the other five go, and it is late; a process descheduled for a few milliseconds once in a while is
// not. A round that waits only on late (or silent) peers waits for them no longer than a probe, kLateShare of the
// time it took to get there, and then completes on its quorum without them; a round completed so counts as one
// whole round of hold-up, so a peer stopped for most of each period stays late through the short runs in which it
// keeps up, and its parts that come within the probe still count. On a slow link every peer's parts take long and
// none comes much after the others, so nobody is late and a round of any length is waited for in full.
//
//   PeerPatience patience(p);
//   patience.heard(q);                         // a frame of q counted in the current round
//   patience.round_done(heard);                // per peer: whether any frame of it counted in the round
//   patience.round_timed(done_us, ended_us);   // per peer: when its last part came, since the round started
//   if (round.waits_only_on(patience.silent_peers())) ...   // complete now (Round::deadline_passed)
//   if (round.waits_only_on(patience.late_peers())) ...     // complete after probe_us(elapsed)
//
// Pure: no clock, no I/O.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace gridtrain::allreduce {

class PeerPatience {
 public:
  // Rounds in a row with nothing counted from a peer before it is silent: one round missed can be a late frame.
  static constexpr std::uint32_t kSilentAfter = 2;
  // A peer is late while the line spends more than kLateShare / (1 + kLateShare) of its recent time waiting for it
  // alone; and a round waiting only on late peers waits this share of its time so far for them (the probe).
  static constexpr double kLateShare = 0.3;
  // What is not a hold-up: a process on a loaded machine (4 nodes on 2 cores) is descheduled for a few milliseconds
  // now and then, which on loopback is more than a round of 2 ms.
  static constexpr std::int64_t kLateSlackUs = 5000;
  // Each round, the sums of hold-ups and of round time keep this share of what they were: about the last 8 rounds.
  static constexpr double kKeep = 7.0 / 8.0;
  // A line's first rounds, not counted: links warming up, a node still starting, say little of its pace.
  static constexpr std::uint32_t kJudgedAfter = 4;
  // round_timed: a peer none of whose parts came in the round; and an index not to be timed (a node's own).
  static constexpr std::int64_t kUnheard = -1;
  static constexpr std::int64_t kNotTimed = -2;
  // The shortest probe, in microseconds: the actors' timers go by milliseconds.
  static constexpr std::int64_t kShortestProbeUs = 1000;

  explicit PeerPatience(std::uint32_t peers = 0)
      : unheard_(peers, 0), silent_(peers, 0), held_us_(peers, 0.0), late_(peers, 0) {}

  std::uint32_t peers() const { return static_cast<std::uint32_t>(unheard_.size()); }
  // A frame of `peer` counted: it is waited for fully again.
  void heard(std::uint32_t peer);
  // A round completed; heard[q] != 0 where some frame of q counted in it (our own index is never silent: set it).
  // REQUIRES: heard.size() == peers()
  void round_done(std::span<const std::uint8_t> heard);
  // Per peer, 1 where it is silent.
  std::span<const std::uint8_t> silent_peers() const { return silent_; }
  bool any_silent() const { return silent_count_ > 0; }
  // Rounds in a row that `peer` went unheard.
  std::uint32_t unheard_rounds(std::uint32_t peer) const { return unheard_[peer]; }

  // A round ended, `ended_us` after it started: completed, or made to complete. done_us[q]: microseconds from its
  // start until q's last part counted in it; kUnheard where a part of q never came; kNotTimed where q is not to be
  // timed (our own index). A peer is timed against the latest of the other timed peers heard; with none (a line of
  // two, seen from one of them) it is not judged. REQUIRES: done_us.size() == peers()
  void round_timed(std::span<const std::int64_t> done_us, std::int64_t ended_us);
  // Per peer, 1 where it is late or silent: a round that waits only on these waits no longer than probe_us().
  std::span<const std::uint8_t> late_peers() const { return late_; }
  bool any_late() const { return late_count_ > 0; }
  // Whether some peer is late or silent and every peer not heard is: the LineMaster does not wait for them.
  // REQUIRES: heard.size() == peers()
  bool only_late_unheard(std::span<const std::uint8_t> heard) const;
  // The share of the recent rounds' time the line spent waiting for `peer` alone (see above).
  double held_share(std::uint32_t peer) const { return time_us_ > 0 ? held_us_[peer] / time_us_ : 0.0; }
  // How long a round that waits only on late peers, `elapsed_us` after it started, waits for them still.
  static std::int64_t probe_us(std::int64_t elapsed_us);

 private:
  void set_silent(std::uint32_t peer, bool silent);
  // late_[peer] from its hold-ups and silence.
  void update_late(std::uint32_t peer);

  std::vector<std::uint32_t> unheard_;
  std::vector<std::uint8_t> silent_;
  std::uint32_t silent_count_ = 0;
  std::vector<double> held_us_;      // per peer, its recent hold-ups, decayed by kKeep a round
  double time_us_ = 0;               // the recent rounds' time, decayed likewise
  std::uint32_t rounds_timed_ = 0;   // up to kJudgedAfter: the first ones are not counted
  std::vector<std::uint8_t> late_;   // 1 where late or silent
  std::uint32_t late_count_ = 0;
};

}  // namespace gridtrain::allreduce
