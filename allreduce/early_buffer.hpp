#pragma once
// EarlyBuffer: round messages that arrive for a line version whose StartLine has not come yet (a fast peer's
// first chunk can overtake the LineMaster's StartLine, which travels another path), held until it comes.
//
// What it holds, and what it drops (each drop counted by the caller):
// - one line version at a time, the newest seen: a message of an older version than the one held is dropped on
//   arrival, and a message of a newer version drops everything held (a newer layout supersedes it);
// - the messages of at most `max_rounds` rounds: a round newer than all held pushes out the oldest held round,
//   whose Worker slot would move past it anyway (catch-up by round key); a message of a round older than every
//   held one, with no room, is dropped;
// - at most `max_cost` in all, a message costing its floats (at least 1, so that floods of empty messages are
//   bounded too): past it the oldest rounds go first. A round's messages to one member carry under 2N floats for
//   a model of N (its block's contributions and the other blocks' means), so a budget of 4N keeps the newest
//   round whole: chunks of the round a Worker will run are never dropped for lack of room.
// Pure: no actors. Not thread-safe: one owner (a DimensionNode).

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "allreduce/round_key.hpp"

namespace gridtrain::allreduce {

template <class Message>
class EarlyBuffer {
 public:
  // REQUIRES: max_rounds >= 1.
  EarlyBuffer(std::size_t max_rounds, std::size_t max_cost) : max_rounds_(max_rounds), max_cost_(max_cost) {}

  // Holds `message` of round `key.round` of line version (key.epoch, key.layout_version), carrying `floats`.
  // Returns how many messages were dropped to hold it, or 1 if it was dropped itself.
  std::size_t hold(const RoundKey& key, std::size_t floats, Message message) {
    std::size_t dropped = 0;
    const auto version = std::tie(key.epoch, key.layout_version);
    if (!rounds_.empty()) {
      if (version < std::tie(epoch_, layout_version_)) return 1;
      if (std::tie(epoch_, layout_version_) < version) dropped += clear();
    }
    epoch_ = key.epoch;
    layout_version_ = key.layout_version;
    const std::size_t cost = floats > 0 ? floats : 1;
    if (!rounds_.count(key.round) && rounds_.size() >= max_rounds_) {
      if (key.round < rounds_.begin()->first) return dropped + 1;
      dropped += drop_oldest();
    }
    while (cost_ + cost > max_cost_ && !rounds_.empty() && rounds_.begin()->first < key.round)
      dropped += drop_oldest();
    if (cost_ + cost > max_cost_) return dropped + 1;  // its own round alone is over the budget
    rounds_[key.round].push_back(std::move(message));
    costs_[key.round] += cost;
    cost_ += cost;
    return dropped;
  }

  // The StartLine of version (epoch, layout_version) came: the messages held for it, in round order and in
  // arrival order within a round, removed. Messages of an older version are dropped (`dropped` counts them);
  // those of a newer one stay.
  std::vector<Message> release(std::uint64_t epoch, std::uint64_t layout_version, std::size_t& dropped) {
    std::vector<Message> out;
    dropped = 0;
    if (rounds_.empty()) return out;
    const auto held = std::tie(epoch_, layout_version_);
    const auto version = std::tie(epoch, layout_version);
    if (version < held) return out;
    if (held < version) {
      dropped = clear();
      return out;
    }
    for (auto& [round, messages] : rounds_)
      out.insert(out.end(), std::make_move_iterator(messages.begin()), std::make_move_iterator(messages.end()));
    clear();
    return out;
  }

  std::size_t size() const {
    std::size_t n = 0;
    for (const auto& [round, messages] : rounds_) n += messages.size();
    return n;
  }
  std::size_t rounds() const { return rounds_.size(); }
  std::size_t cost() const { return cost_; }

 private:
  std::size_t drop_oldest() {
    const std::size_t n = rounds_.begin()->second.size();
    cost_ -= costs_.begin()->second;
    rounds_.erase(rounds_.begin());
    costs_.erase(costs_.begin());
    return n;
  }

  std::size_t clear() {
    const std::size_t n = size();
    rounds_.clear();
    costs_.clear();
    cost_ = 0;
    return n;
  }

  std::size_t max_rounds_;
  std::size_t max_cost_;
  std::uint64_t epoch_ = 0;
  std::uint64_t layout_version_ = 0;
  std::map<std::uint64_t, std::vector<Message>> rounds_;
  std::map<std::uint64_t, std::size_t> costs_;
  std::size_t cost_ = 0;
};

}  // namespace gridtrain::allreduce
