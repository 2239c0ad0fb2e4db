#pragma once
// The accuracy plot: test accuracy against the time since each node started training, one curve per node, drawn
// by gnuplot from a metrics CSV (telemetry/epoch_log.hpp) whose rows may come from many nodes.

#include <string>
#include <vector>

namespace gridtrain::telemetry {

// A gnuplot script that reads `csv` and writes the plot to `png`, one curve for each of `nodes` (the CSV's node
// column), titled `title`.
std::string accuracy_plot_script(const std::string& csv, const std::vector<std::string>& nodes,
                                 const std::string& png, const std::string& title);

}  // namespace gridtrain::telemetry
