#include "allreduce/peer_patience.hpp"

namespace gridtrain::allreduce {

void PeerPatience::set_silent(std::uint32_t peer, bool silent) {
  if ((silent_[peer] != 0) == silent) return;
  silent_[peer] = silent ? 1 : 0;
  silent ? ++silent_count_ : --silent_count_;
}

void PeerPatience::heard(std::uint32_t peer) {
  if (peer >= peers()) return;
  unheard_[peer] = 0;
  set_silent(peer, false);
}

bool PeerPatience::only_silent_unheard(std::span<const std::uint8_t> heard) const {
  if (!any_silent()) return false;
  for (std::uint32_t q = 0; q < peers() && q < heard.size(); ++q)
    if (!heard[q] && !silent_[q]) return false;
  return true;
}

void PeerPatience::round_done(std::span<const std::uint8_t> heard) {
  for (std::uint32_t q = 0; q < peers() && q < heard.size(); ++q) {
    if (heard[q]) {
      unheard_[q] = 0;
      set_silent(q, false);
    } else if (++unheard_[q] >= kSilentAfter) {
      set_silent(q, true);
    }
  }
}

}  // namespace gridtrain::allreduce
