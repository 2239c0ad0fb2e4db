#include "actors/messages.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <string>

namespace gridtrain::actors {

namespace {
std::atomic<std::uint64_t> refused_payload_count{0};
}  // namespace

std::uint64_t refused_payloads() { return refused_payload_count.load(); }

void refuse_payload(std::uint64_t declared, std::size_t bytes_there) {
  // The first few, then one in a thousand: a flood of them cannot flood the log.
  const std::uint64_t n = ++refused_payload_count;
  if (n <= 5 || n % 1000 == 0)
    spdlog::warn("a message's float payload declared {} floats with {} bytes there; dropped ({} so far)", declared,
                 bytes_there, n);
}

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

Status check(const LineSettings& settings, std::uint64_t model_floats) {
  if (settings.model_floats != model_floats)
    return Error{.message = "a model of " + std::to_string(settings.model_floats) + " floats; ours has " +
                            std::to_string(model_floats)};
  if (!allreduce::kRoundsInFlightRange.contains(settings.rounds_in_flight))
    return Error{.key = "grid.rounds_in_flight",
                 .message = "expected an integer " + allreduce::kRoundsInFlightRange.describe() + ", found " +
                            std::to_string(settings.rounds_in_flight)};
  return allreduce::validate(settings.round);
}

LayoutState layout_state(const grid::LayoutSnapshot& snapshot) {
  LayoutState out{snapshot.fixed_dims, snapshot.max_line, snapshot.dims, snapshot.side, {}, {}, {}, {}, {}};
  for (const auto& [node, coords] : snapshot.placements) {
    out.nodes.push_back(node);
    out.coords.insert(out.coords.end(), coords.begin(), coords.end());
  }
  for (const auto& [line, master] : snapshot.masters) {
    out.master_dims.push_back(static_cast<std::uint32_t>(line.dim));
    out.master_lines.push_back(line.index);
    out.master_nodes.push_back(master);
  }
  return out;
}

Result<grid::LayoutSnapshot> layout_snapshot(const LayoutState& state) {
  auto refuse = [](std::string why) { return Error{.message = "a malformed layout: " + std::move(why)}; };
  if (state.dims < 1 || state.dims > grid::kMaxDims)
    return refuse("dims " + std::to_string(state.dims) + " outside [1, " + std::to_string(grid::kMaxDims) + "]");
  if (state.coords.size() != state.nodes.size() * static_cast<std::size_t>(state.dims))
    return refuse(std::to_string(state.coords.size()) + " coordinates for " + std::to_string(state.nodes.size()) +
                  " nodes in " + std::to_string(state.dims) + " dimensions");
  if (state.master_lines.size() != state.master_dims.size() || state.master_nodes.size() != state.master_dims.size())
    return refuse("master lists of different lengths");
  grid::LayoutSnapshot out{state.fixed_dims, state.max_line, state.dims, state.side, {}, {}};
  const auto dims = static_cast<std::size_t>(state.dims);
  for (std::size_t i = 0; i < state.nodes.size(); ++i) {
    const auto first = state.coords.begin() + static_cast<std::ptrdiff_t>(i * dims);
    out.placements.emplace_back(state.nodes[i], std::vector<int>(first, first + static_cast<std::ptrdiff_t>(dims)));
  }
  for (std::size_t j = 0; j < state.master_dims.size(); ++j) {
    if (state.master_dims[j] >= static_cast<std::uint32_t>(state.dims)) return refuse("a master of no dimension");
    out.masters.emplace_back(grid::LineId{static_cast<int>(state.master_dims[j]), state.master_lines[j]},
                             state.master_nodes[j]);
  }
  return out;
}

void register_message_types(caf::actor_system_config& cfg) {
  // Nested types too: registering them costs nothing and keeps a later top-level use from going out empty.
  cfg.add_message_type<allreduce::RoundKey>("gridtrain::round_key")
      .add_message_type<allreduce::RoundConfig>("gridtrain::round_config")
      .add_message_type<FloatPayload>("gridtrain::float_payload")
      .add_message_type<Join>("gridtrain::join")
      .add_message_type<JoinChallenge>("gridtrain::join_challenge")
      .add_message_type<Welcome>("gridtrain::welcome")
      .add_message_type<Reject>("gridtrain::reject")
      .add_message_type<Leave>("gridtrain::leave")
      .add_message_type<Removed>("gridtrain::removed")
      .add_message_type<JoinOutcome>("gridtrain::join_outcome")
      .add_message_type<LinePeer>("gridtrain::line_peer")
      .add_message_type<LineSettings>("gridtrain::line_settings")
      .add_message_type<StartLine>("gridtrain::start_line")
      .add_message_type<StopLine>("gridtrain::stop_line")
      .add_message_type<StartRound>("gridtrain::start_round")
      .add_message_type<RoundDone>("gridtrain::round_done")
      .add_message_type<Placement>("gridtrain::placement")
      .add_message_type<MemberState>("gridtrain::member_state")
      .add_message_type<LayoutState>("gridtrain::layout_state")
      .add_message_type<GridState>("gridtrain::grid_state")
      .add_message_type<NodeFigures>("gridtrain::node_figures")
      .add_message_type<NodeReport>("gridtrain::node_report")
      .add_message_type<NodeView>("gridtrain::node_view")
      .add_message_type<GridView>("gridtrain::grid_view")
      .add_message_type<RoundStats>("gridtrain::round_stats")
      .add_message_type<DimensionStats>("gridtrain::dimension_stats")
      .add_message_type<DataPlaneStats>("gridtrain::data_plane_stats")
      .add_message_type<JoinStats>("gridtrain::join_stats")
      .add_message_type<NodeStats>("gridtrain::node_stats");
}

}  // namespace gridtrain::actors
