#pragma once
// LineMaster: paces the allreduce rounds of one line. Every node has one per dimension, dormant until the
// GridMaster appoints it with a StartLine for the line it masters.
//
// It keeps: its line (members and settings, for one layout version) and the rounds in flight: started, and not
// yet reported done by every peer.
// It reacts to: StartLine (forwards it to every member, then starts round 0), StopLine (goes dormant), RoundDone.
// It starts round r+1 once ceil(θa·p) peers reported round r done, and never has more than k rounds in flight.
// So with θa < 1 the line runs up to k rounds ahead of a straggler, and no further: CAF sends have no
// backpressure, and a peer that has stalled must not make the others queue rounds for it without limit. A dead
// peer holds its line for at most k rounds, until the GridMaster's failure detection re-forms the line (a new
// layout version, which drops every round of the old one). A line of one peer runs no rounds.
// It tells: every member's DimensionNode (StartLine, StartRound).

#include <caf/all.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "actors/messages.hpp"

namespace gridtrain::actors {

struct LineMasterState {
  static inline const char* name = "line_master";
  std::uint32_t dim = 0;
  std::optional<StartLine> line;
  std::uint32_t advance_quorum = 1;  // ceil(θa·p)
  std::uint64_t next_round = 0;
  std::map<std::uint64_t, std::vector<bool>> in_flight;  // round -> which peers reported it done
  bool advance = true;  // round next_round - 1 reached the advance quorum (true before round 0)
  // allreduce.every_steps > 0: the rounds it may still start. The node's learner raises it by one every
  // every_steps steps (allow_rounds_atom), so a line runs at most one round per every_steps steps of its master's
  // learner. nullopt when every_steps is 0: rounds back to back.
  std::optional<std::uint64_t> every_steps_budget;
  std::uint64_t rounds_started = 0;
  std::uint64_t stale = 0;
  std::uint64_t bad_messages = 0;
};

// `paced_by_every_steps`: start with an every_steps budget of 0 (see LineMasterState::every_steps_budget). Also
// handles (allow_rounds_atom, n): n more rounds in the budget; and answers stats_atom with the rounds it started.
caf::behavior line_master(caf::stateful_actor<LineMasterState>* self, std::uint32_t dim, bool paced_by_every_steps);

}  // namespace gridtrain::actors
