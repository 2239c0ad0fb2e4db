#pragma once
// DimensionNode: a node's member of its line in one grid dimension: the control plane's side of that line. The
// line's chunks travel over the node's data plane (dataplane::Endpoint), which runs its rounds.
//
// It keeps: the node's current line in this dimension (from the line's LineMaster).
// It reacts to: StartLine (checked: a line must contain us and agree with our ParameterStore; then handed to the
// data plane), StartRound (handed on; in timeout quorum mode it also keeps the round's deadline, since the actors
// keep every clock: with as few timers as will do, actors/round_deadlines.hpp), the data plane's round events (a
// round done: RoundDone to the LineMaster; a round a peer's frame started, or one whose frames were still landing
// at its deadline: a deadline), lost_atom (the node lost the cluster: no line).
// It tells: the LineMaster (RoundDone), the data plane. Its node asks for its DimensionStats (stats_atom).

#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/credentials.hpp"
#include "actors/messages.hpp"
#include "actors/round_deadlines.hpp"
#include "dataplane/service.hpp"
#include "learner/parameter_store.hpp"

namespace gridtrain::actors {

struct DimensionNodeSetup {
  std::uint32_t dim = 0;
  std::uint64_t node_id = 0;
  std::shared_ptr<learner::ParameterStore> store;
  std::shared_ptr<dataplane::Endpoint> data;  // the node's data plane
  Credentials credentials;  // for the gates of the peers it dials
};

struct DimensionNodeState {
  static inline const char* name = "dimension_node";

  DimensionNodeSetup setup;
  std::optional<StartLine> line;
  // The node lost the cluster: `line` is no longer ours (its version still tells stale messages apart), until
  // a StartLine of a newer version comes.
  bool line_lost = false;
  // Timeout quorum mode: the deadlines of the line's rounds not yet done here.
  RoundDeadlines<allreduce::RoundKey, caf::actor_clock::time_point> deadlines;
  RoundStats own;  // StartLines and StartRounds dropped here
  std::uint64_t bad_messages = 0;
};

// How a node opens its endpoint on the process's data plane: rounds fetch from and update `store` (through
// binding::store_access), handshakes prove `token`, and round events go as round_event_atom to the DimensionNode of
// their dimension in `routes`, which the node fills once it has spawned them (no line, hence no event, comes before).
dataplane::EndpointSetup endpoint_setup(std::uint64_t node_id, std::shared_ptr<learner::ParameterStore> store,
                                        std::string token, std::shared_ptr<const std::vector<caf::actor>> routes);

// Also answers stats_atom with its DimensionStats.
caf::behavior dimension_node(caf::stateful_actor<DimensionNodeState>* self, DimensionNodeSetup setup);

}  // namespace gridtrain::actors
