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
//   PeerPatience patience(p);
//   patience.heard(q);                // a frame of q counted in the current round
//   patience.round_done(heard);       // per peer: whether any frame of it counted in the round that completed
//   if (round.waits_only_on(patience.silent_peers())) ...   // complete now (Round::deadline_passed)
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

  explicit PeerPatience(std::uint32_t peers = 0) : unheard_(peers, 0), silent_(peers, 0) {}

  std::uint32_t peers() const { return static_cast<std::uint32_t>(unheard_.size()); }
  // A frame of `peer` counted: it is waited for fully again.
  void heard(std::uint32_t peer);
  // A round completed; heard[q] != 0 where some frame of q counted in it (our own index is never silent: set it).
  // REQUIRES: heard.size() == peers()
  void round_done(std::span<const std::uint8_t> heard);
  // Per peer, 1 where it is silent.
  std::span<const std::uint8_t> silent_peers() const { return silent_; }
  bool any_silent() const { return silent_count_ > 0; }
  // Whether some peer is silent and every peer not heard (heard[q] == 0) is: what is missing need not be waited for.
  // REQUIRES: heard.size() == peers()
  bool only_silent_unheard(std::span<const std::uint8_t> heard) const;
  // Rounds in a row that `peer` went unheard.
  std::uint32_t unheard_rounds(std::uint32_t peer) const { return unheard_[peer]; }

 private:
  void set_silent(std::uint32_t peer, bool silent);

  std::vector<std::uint32_t> unheard_;
  std::vector<std::uint8_t> silent_;
  std::uint32_t silent_count_ = 0;
};

}  // namespace gridtrain::allreduce
