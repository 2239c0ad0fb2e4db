#pragma once
// The live grid (actors::GridView) as `gridnode status` prints it: one JSON object for tools, a table for people.

#include <string>

#include "actors/reports.hpp"

namespace gridtrain::telemetry {

// One JSON object: {"epoch", "layout_version", "dims", "shape": [..], "nodes": [{"id", "id_hex", "address",
// "coords": [..], "masters": [dims], "rounds_done", "param_mean", "param_l2", "samples", "test_accuracy",
// "param_distance", "stale_dropped", "quorum_shortfalls"}]}. test_accuracy is -1 until the learner evaluates;
// param_distance is null where unknown. These names are a contract: fields may be added, none renamed.
std::string grid_view_json(const actors::GridView& view);

// The same as a table, one line per node, under a summary line and a header line.
std::string grid_view_table(const actors::GridView& view);

}  // namespace gridtrain::telemetry
