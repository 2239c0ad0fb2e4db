#pragma once
// RoundDeadlines: the quorum deadlines of a line's open rounds, kept with as few timers as will do.
//
// A CAF 0.17 delayed message cannot be cancelled, and each one costs the clock thread a wake-up when it is set and
// the actor another when it fires, whether its round is still open or not. A timer per round (a round every 40-60 ms
// under the learner's pacing, a deadline 200 ms after it starts, and almost every round done long before) was a
// third of what a round cost a training node's actors (BENCHMARKS.md, "The cost of a round"). So a timer is set
// only where none already set fires at or before the new deadline; when one fires, the deadlines due are handed out
// and a timer is set for the earliest one left, unless one set already covers it. Each deadline is still met at its
// time, and a round that ends first (remove) costs no timer of its own.
//
//   if (auto at = deadlines.add(key, now + timeout)) set_timer(*at);   // the timer's message carries `at`
//   deadlines.remove(key);                                             // the round ended
//   auto due = deadlines.fired(at, now);                                // on the timer's message
//   for (const Key& k : due.keys) ...;  if (due.arm) set_timer(*due.arm);
//
// Pure: the caller owns the clock and the timers. Not thread-safe (one actor's state).

#include <algorithm>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace gridtrain::actors {

template <class Key, class TimePoint>
class RoundDeadlines {
 public:
  struct Due {
    std::vector<Key> keys;       // whose deadline has passed, in the order their deadlines fall; no longer kept
    std::optional<TimePoint> arm;  // a timer to set for this time
  };

  // Key's deadline is `due`, or the one it has if that is earlier: a round's first deadline is the one that counts
  // (the round asks again, with add, where it wants more time). Returns the time to set a timer for, if none set
  // fires by then.
  std::optional<TimePoint> add(const Key& key, TimePoint due) {
    auto it = std::find_if(pending_.begin(), pending_.end(), [&](const auto& p) { return p.first == key; });
    if (it == pending_.end())
      pending_.emplace_back(key, due);
    else if (due < it->second)
      it->second = due;
    else
      return std::nullopt;
    return cover(due);
  }

  // The round ended (done, retired, its line gone): its deadline no longer matters. Its timer, if it set one, still
  // fires, and finds nothing to do.
  void remove(const Key& key) {
    std::erase_if(pending_, [&](const auto& p) { return p.first == key; });
  }

  // Every round's deadline goes (a new line); the timers set stay known, since their messages will still come.
  void clear() { pending_.clear(); }

  // The timer set for `at` fired, now.
  Due fired(TimePoint at, TimePoint now) {
    if (auto it = timers_.find(at); it != timers_.end()) timers_.erase(it);
    Due out;
    std::stable_sort(pending_.begin(), pending_.end(),
                     [](const auto& a, const auto& b) { return a.second < b.second; });
    auto first_left = std::find_if(pending_.begin(), pending_.end(), [&](const auto& p) { return now < p.second; });
    for (auto it = pending_.begin(); it != first_left; ++it) out.keys.push_back(it->first);
    pending_.erase(pending_.begin(), first_left);
    if (!pending_.empty()) out.arm = cover(pending_.front().second);
    return out;
  }

  bool empty() const { return pending_.empty(); }
  // Timers set and not yet fired.
  std::size_t timers() const { return timers_.size(); }

 private:
  // A timer for `due`, unless one set fires at or before it.
  std::optional<TimePoint> cover(TimePoint due) {
    if (!timers_.empty() && *timers_.begin() <= due) return std::nullopt;
    timers_.insert(due);
    return due;
  }

  std::vector<std::pair<Key, TimePoint>> pending_;  // a few: at most the rounds in flight
  std::multiset<TimePoint> timers_;
};

}  // namespace gridtrain::actors
