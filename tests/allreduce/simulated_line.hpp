#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "allreduce/round.hpp"

namespace gridtrain::allreduce::testing {

// One Send in flight, from peer `from` to peer `send.to`.
struct Message {
  std::uint32_t from = 0;
  Send send;
};

enum class Delivery : std::uint8_t {
  in_order,  // start every peer, then deliver first in, first out
  shuffled,  // start peers in random order between random deliveries
};

// The p peers of one line, each with its own Round, and the network between them, all in one
// thread: what the Worker actors and the transport do in the real system.
class SimulatedLine {
 public:
  SimulatedLine(std::size_t model_floats, std::uint32_t peers, RoundConfig config, RoundKey key = {});

  std::uint32_t peers() const { return static_cast<std::uint32_t>(rounds_.size()); }
  Round& peer(std::uint32_t i) { return rounds_[i]; }
  const RoundKey& key() const { return key_; }

  // Every peer starts round `key` in its Round's buffers (Round::reset); what is in flight is lost.
  void reset(const RoundKey& key);

  // Fetch: every peer fills its send buffer with value(rank, index).
  void fill(const std::function<float(std::uint32_t rank, std::size_t index)>& value);

  void scatter(std::uint32_t i);
  void scatter_all();
  void deadline(std::uint32_t i);
  void deadline_all();
  void finish(std::uint32_t i);
  void finish_all();

  // Hands one message to its destination and queues what that peer sends in answer.
  Verdict deliver(const Message& message);
  // Takes messages off the queue that match `pick` and delivers them in order; the rest stay.
  std::size_t deliver_if(const std::function<bool(const Message&)>& pick);
  std::size_t deliver_all() {
    return deliver_if([](const Message&) { return true; });
  }
  // Removes the matching messages from the queue, as a network that lost them.
  std::size_t drop_if(const std::function<bool(const Message&)>& pick);
  // Removes the first matching message from the queue and returns it; throws if there is none.
  Message take(const std::function<bool(const Message&)>& pick);
  std::vector<Message>& pending() { return pending_; }

  struct RunStats {
    std::size_t dropped = 0;
    bool complete_before_deadline = false;  // every peer completed on quorum alone
    bool complete_before_finish = false;    // ... or with the deadline's help
  };
  // Drives the line until the queue is empty: starts the peers, delivers (dropping each message
  // with probability drop_rate), then passes the deadline and delivers, then finishes and delivers.
  RunStats run(Delivery delivery, std::uint64_t seed, double drop_rate = 0.0);

  bool all_complete() const;

  // The peers whose contributions to chunk c were counted by its reducer, in arrival order.
  const std::vector<std::uint32_t>& contributors(std::uint32_t c) const { return contributors_[c]; }
  // The mean a reducer must have produced for chunk c: over the send buffers of its contributors,
  // summed in double, so it does not depend on their order.
  float expected_mean(std::uint32_t c, std::size_t index) const;
  std::size_t verdicts(Verdict v) const { return verdicts_[static_cast<std::size_t>(v)]; }

 private:
  void queue(std::uint32_t from, std::span<const Send> sends);

  RoundKey key_;
  std::vector<Round> rounds_;
  std::vector<Message> pending_;
  std::vector<std::vector<std::uint32_t>> contributors_;
  std::vector<std::size_t> verdicts_ = std::vector<std::size_t>(6, 0);
};

// The mean `round` holds for model index `index` (its chunk has a count): its result, or where the owner sent a
// delta, our contribution (the send buffer) plus the delta, which is the mean within a rounding (exactly, where
// the values' arithmetic is exact, as in the tests' small integers).
float mean_held(const Round& round, std::size_t index);
std::vector<float> means_held(const Round& round);

}  // namespace gridtrain::allreduce::testing
