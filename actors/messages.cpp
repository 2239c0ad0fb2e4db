#include "actors/messages.hpp"

namespace gridtrain::actors {

std::string to_string(JoinResult result) {
  switch (result) {
    case JoinResult::pending: return "pending";
    case JoinResult::welcomed: return "welcomed";
    case JoinResult::rejected: return "rejected";
    case JoinResult::unreachable: return "unreachable";
    case JoinResult::stopped: return "stopped";
  }
  return "unknown";
}

RoundStats& RoundStats::operator+=(const RoundStats& o) {
  rounds_done += o.rounds_done;
  caught_up += o.caught_up;
  abandoned += o.abandoned;
  stale_dropped += o.stale_dropped;
  malformed += o.malformed;
  quorum_shortfalls += o.quorum_shortfalls;
  return *this;
}

RoundStats NodeStats::total() const {
  RoundStats sum;
  for (const auto& d : dims) sum += d.rounds;
  return sum;
}

void register_message_types(caf::actor_system_config& cfg) {
  // Nested types too: registering them costs nothing and keeps a later top-level use from going out empty.
  cfg.add_message_type<allreduce::RoundKey>("gridtrain::round_key")
      .add_message_type<FloatPayload>("gridtrain::float_payload")
      .add_message_type<Join>("gridtrain::join")
      .add_message_type<Welcome>("gridtrain::welcome")
      .add_message_type<Reject>("gridtrain::reject")
      .add_message_type<Leave>("gridtrain::leave")
      .add_message_type<JoinOutcome>("gridtrain::join_outcome")
      .add_message_type<LinePeer>("gridtrain::line_peer")
      .add_message_type<LineSettings>("gridtrain::line_settings")
      .add_message_type<StartLine>("gridtrain::start_line")
      .add_message_type<StopLine>("gridtrain::stop_line")
      .add_message_type<StartRound>("gridtrain::start_round")
      .add_message_type<ScatterChunk>("gridtrain::scatter_chunk")
      .add_message_type<ReducedChunk>("gridtrain::reduced_chunk")
      .add_message_type<RoundDone>("gridtrain::round_done")
      .add_message_type<MemberState>("gridtrain::member_state")
      .add_message_type<GridState>("gridtrain::grid_state")
      .add_message_type<NodeReport>("gridtrain::node_report")
      .add_message_type<NodeStatus>("gridtrain::node_status")
      .add_message_type<ClusterStatus>("gridtrain::cluster_status")
      .add_message_type<RoundStats>("gridtrain::round_stats")
      .add_message_type<DimensionStats>("gridtrain::dimension_stats")
      .add_message_type<NodeStats>("gridtrain::node_stats");
}

}  // namespace gridtrain::actors
