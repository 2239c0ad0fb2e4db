#include "allreduce/peer_patience.hpp"

#include <algorithm>
#include <cmath>

namespace gridtrain::allreduce {

void PeerPatience::set_silent(std::uint32_t peer, bool silent) {
  if ((silent_[peer] != 0) != silent) {
    silent_[peer] = silent ? 1 : 0;
    silent ? ++silent_count_ : --silent_count_;
  }
  update_late(peer);
}

void PeerPatience::update_late(std::uint32_t peer) {
  const bool late =
      silent_[peer] != 0 ||
      (time_us_ > 0 && held_us_[peer] * (1.0 + kLateShare) > kLateShare * time_us_);
  if ((late_[peer] != 0) == late) return;
  late_[peer] = late ? 1 : 0;
  late ? ++late_count_ : --late_count_;
}

void PeerPatience::round_timed(std::span<const std::int64_t> done_us, std::int64_t ended_us) {
  if (rounds_timed_ < kJudgedAfter) {  // a line's first rounds: not counted
    ++rounds_timed_;
    return;
  }
  const std::uint32_t n = std::min<std::uint32_t>(peers(), static_cast<std::uint32_t>(done_us.size()));
  // The two latest timed peers heard: a peer's "others" are the latest of them that is not itself.
  std::int64_t latest = -1, second = -1;
  std::uint32_t latest_peer = n;
  for (std::uint32_t q = 0; q < n; ++q) {
    if (done_us[q] < 0) continue;
    if (done_us[q] > latest) {
      second = latest;
      latest = done_us[q];
      latest_peer = q;
    } else if (done_us[q] > second) {
      second = done_us[q];
    }
  }
  time_us_ = time_us_ * kKeep + static_cast<double>(std::max<std::int64_t>(ended_us, 0));
  for (std::uint32_t q = 0; q < peers(); ++q) {
    held_us_[q] *= kKeep;
    if (q >= n || done_us[q] == kNotTimed) continue;
    const std::int64_t others = q == latest_peer ? second : latest;
    if (others < 0) continue;  // nobody to time it against
    std::int64_t held = 0;
    if (done_us[q] == kUnheard)
      held = std::max<std::int64_t>(ended_us, 0);
    else
      held = std::max<std::int64_t>(0, done_us[q] - others - kLateSlackUs);
    held_us_[q] += static_cast<double>(held);
  }
  for (std::uint32_t q = 0; q < peers(); ++q) update_late(q);
}

bool PeerPatience::only_late_unheard(std::span<const std::uint8_t> heard) const {
  if (!any_late()) return false;
  for (std::uint32_t q = 0; q < peers() && q < heard.size(); ++q)
    if (!heard[q] && !late_[q]) return false;
  return true;
}

std::int64_t PeerPatience::probe_us(std::int64_t elapsed_us) {
  return std::max(kShortestProbeUs,
                  static_cast<std::int64_t>(std::ceil(static_cast<double>(std::max<std::int64_t>(elapsed_us, 0)) *
                                                      kLateShare)));
}

void PeerPatience::heard(std::uint32_t peer) {
  if (peer >= peers()) return;
  unheard_[peer] = 0;
  set_silent(peer, false);
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
