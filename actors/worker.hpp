#pragma once
// Worker: drives one allreduce::Round at a time for its DimensionNode (slot r % k runs round r).
//
// It keeps: the line (peers, our index, the LineMaster) and the current Round, which it keeps after completion
// so that slower peers still get our block's mean, until the next round of this slot replaces it.
// It reacts to: StartLine (a new line drops the current round: abandoned, no update), lost_atom (the node lost the
// cluster: the same, and no line until the next StartLine), StartRound and the peers' chunks. A message of an older round is dropped and counted; one of a newer round makes it finish the current
// round with what it has (BIDMach's catchUp) and start the newer one. In timeout quorum mode a deadline message,
// sent to itself when the round starts, lets the round go on with a quorum.
// After a stall longer than the connection timeout it sits out as long again, dropping (and counting) round
// messages: see WorkerSetup::stall_limit.
// It tells: the peers' DimensionNodes (chunks), the LineMaster (RoundDone) and its parent (its RoundStats).

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "actors/messages.hpp"
#include "allreduce/round.hpp"
#include "learner/parameter_store.hpp"

namespace gridtrain::actors {

struct WorkerSetup {
  std::uint32_t dim = 0;
  std::uint32_t slot = 0;
  std::uint64_t node_id = 0;
  std::shared_ptr<learner::ParameterStore> store;
  caf::actor parent;  // gets (slot, RoundStats) whenever the counters change; may be null
  // A worker that finds it did not run for longer than this (the process was stopped, or starved) sits out the
  // same time again: its peers' connection timeout has dropped its connections, and what it would send for the
  // backlog it wakes to cannot arrive. CAF 0.17 serializes a message for a peer whose connection has just closed
  // into a buffer it never frees, so that backlog cost memory for good. The node passes
  // cluster.connection_timeout_ms; zero turns this off.
  std::chrono::milliseconds stall_limit{0};
};

struct WorkerState {
  static inline const char* name = "worker";
  WorkerSetup setup;
  std::optional<StartLine> line;
  std::uint32_t self_index = 0;
  std::optional<allreduce::Round> round;
  bool done = false;  // the current round's update is applied and RoundDone sent
  RoundStats stats;
  RoundStats published;
  caf::actor_clock::time_point last_ran;  // when this worker last handled a message, ticks included
  caf::actor_clock::time_point sit_out_until;
  bool ticking = false;  // a tick is on its way (only while there is a line; see WorkerSetup::stall_limit)
  std::uint64_t bad_messages = 0;
};

// Also answers stats_atom with its RoundStats.
caf::behavior worker(caf::stateful_actor<WorkerState>* self, WorkerSetup setup);

}  // namespace gridtrain::actors
