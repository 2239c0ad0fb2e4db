#pragma once
// GridMaster: the cluster's membership and grid. One per cluster, spawned by the node that bootstraps it.
//
// It keeps: the members (their handles and last NodeReport), the grid::Layout, the epoch and the layout version
// (raised on every change).
// It reacts to: Join (checked: protocol, token proof, model signature, a well-formed request; then Welcome or
// Reject with a reason), Leave, the down_msg of a member's node (it monitors every one), NodeReport, and
// grid_view_atom (the live grid, from the last reports).
// On every join or leave it turns the Layout's LayoutDelta into messages: StopLine to the LineMasters that lost
// their line, StartLine to the appointed LineMaster of each new or changed line only, and the GridState to
// every node.

#include <caf/all.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "config/config.hpp"
#include "grid/layout.hpp"

namespace gridtrain::actors {

struct GridMasterSetup {
  config::Config config;  // the cluster's config: the grid's shape and every line's settings come from it
  std::string token;      // the cluster token; "" = none
  std::uint64_t model_signature = 0;
  std::uint64_t model_floats = 0;
  std::string address;  // advertised host:port of the node hosting the GridMaster
  std::uint64_t node_id = 0;  // that node's id
};

// The settings every line of this cluster runs with.
LineSettings line_settings(const config::Config& config, std::uint64_t model_floats);

struct GridMasterState {
  struct Member {
    std::string address;
    caf::actor node;
    std::vector<caf::actor> dimension_nodes;
    std::vector<caf::actor> line_masters;
    std::optional<NodeReport> report;
  };

  static inline const char* name = "grid_master";
  GridMasterSetup setup;
  LineSettings settings;
  std::uint64_t epoch = 1;  // raised by a successor on failover (not implemented yet)
  std::uint64_t layout_version = 0;
  grid::Layout layout = grid::Layout::fixed(1);
  std::map<std::uint64_t, Member> members;
  std::uint64_t rejected = 0;
  std::uint64_t bad_messages = 0;
};

caf::behavior grid_master(caf::stateful_actor<GridMasterState>* self, GridMasterSetup setup);

// What the GridMaster pushes to every node on each change (and a successor would restore from).
GridState grid_state(const GridMasterState& state);

}  // namespace gridtrain::actors
