#pragma once
// The live grid (actors::GridView) as `gridnode status` prints it: one JSON object for tools, a table for people.

#include <cstddef>
#include <string>
#include <vector>

#include "actors/reports.hpp"

namespace gridtrain::telemetry {

// How many other members share at least one line with each member, in view.nodes' order: members whose coords
// agree on every coordinate but one. 0 for a member that averages with nobody (alone in the cluster, or not placed
// in the layout yet). O(nodes * dims).
std::vector<std::size_t> line_peer_counts(const actors::GridView& view);

// One warning per member that averages with nobody, naming it and why; empty when every member has a line peer.
std::vector<std::string> grid_view_warnings(const actors::GridView& view);

// One JSON object: {"epoch", "layout_version", "dims", "shape": [..], "nodes": [{"id", "id_hex", "address",
// "coords": [..], "masters": [dims], "line_peers", "rounds_done", "param_mean", "param_l2", "samples",
// "test_accuracy", "param_distance", "stale_dropped", "quorum_shortfalls"}], "warnings": [".."]}. dims and shape
// are the effective ones the layout uses now (at most grid.dims). test_accuracy is -1 until the learner evaluates;
// param_distance is null where unknown. These names are a contract: fields may be added, none renamed.
std::string grid_view_json(const actors::GridView& view);

// The same as a table, one line per node, under a summary line and a header line, then one "warning: " line
// per member that averages with nobody.
std::string grid_view_table(const actors::GridView& view);

}  // namespace gridtrain::telemetry
