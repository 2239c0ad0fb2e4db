#pragma once
// DimensionNode: a node's member of its line in one grid dimension.
//
// It keeps: the node's current line in this dimension (from the line's LineMaster) and k Workers, its children.
// It reacts to: StartLine (checked: a line must contain us and agree with our ParameterStore), and round messages,
// which it routes by round key: the current line's round r goes to Worker r % k; an older line's is dropped and
// counted; a newer line's waits (bounded) for its StartLine, which may arrive after a fast peer's first chunk.
// It tells: its Workers. Its node asks for its DimensionStats (stats_atom).

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "actors/messages.hpp"
#include "allreduce/early_buffer.hpp"
#include "learner/parameter_store.hpp"

namespace gridtrain::actors {

struct DimensionNodeSetup {
  std::uint32_t dim = 0;
  std::uint64_t node_id = 0;
  std::shared_ptr<learner::ParameterStore> store;
  std::chrono::milliseconds stall_limit{0};  // for its Workers: WorkerSetup::stall_limit
};

struct DimensionNodeState {
  static inline const char* name = "dimension_node";

  DimensionNodeSetup setup;
  std::optional<StartLine> line;
  // The node lost the cluster: `line` is no longer ours (its version still tells stale messages apart), until
  // a StartLine of a newer version comes.
  bool line_lost = false;
  std::vector<caf::actor> workers;
  std::vector<RoundStats> worker_stats;
  RoundStats own;  // drops at routing
  // Messages of a line version we have not been told of, kept until its StartLine comes: at most the rounds a
  // line can have open, and 4N floats, which keeps the newest round whole (allreduce/early_buffer.hpp).
  allreduce::EarlyBuffer<caf::message> early{allreduce::kRoundsInFlightRange.max, 0};
  std::uint64_t bad_messages = 0;
};

// Also answers stats_atom with its DimensionStats.
caf::behavior dimension_node(caf::stateful_actor<DimensionNodeState>* self, DimensionNodeSetup setup);

}  // namespace gridtrain::actors
