#pragma once
// Plots of a metrics CSV (telemetry/epoch_log.hpp; nodes write one with metrics.csv, `gridnode demo` merges its
// nodes' into one): test accuracy, training loss, samples/s and τ against the time since each node started
// training, one curve per node, drawn by gnuplot (`gridnode plot`, and the demo's plots).
//
// The CSV is read and checked here first: gnuplot never reads the user's file, only a data file written from
// the checked rows, and node names go into its script only if they are plain (letters, digits, . _ : -), so a
// crafted CSV cannot make gnuplot run anything.

#include <string>
#include <vector>

#include "base/result.hpp"

namespace gridtrain::telemetry {

struct MetricsRow {
  double time_s = 0;
  std::string node;
  int epoch = 0;
  double samples = 0;
  double samples_per_s = 0;
  double loss = 0;
  double test_accuracy = 0;
  double tau = 0;  // NaN: no round completed in that epoch (an empty field)
  double rounds = 0;
};

// The rows of a metrics CSV, in file order. Header lines (one per concatenated file) are skipped. Errors name
// the file, the line, and what is wrong (another header, a field that is no number, a node name that is not plain).
Result<std::vector<MetricsRow>> read_metrics_csv(const std::string& path);

// One figure: its file name in the output folder, the CSV column it plots, its axis label.
struct MetricsFigure {
  std::string file;   // "accuracy.png"
  std::string label;  // "test accuracy"
  double MetricsRow::*value;
  // Written across the figure's empty chart when no row has a value for it (only τ can be empty: a single node,
  // or nodes that never averaged): gnuplot refuses to plot a curve with no point, and a missing PNG would hide the
  // other three.
  std::string when_empty;
};

// accuracy.png, loss.png, samples_per_s.png, tau.png.
const std::vector<MetricsFigure>& metrics_figures();

// gnuplot's data file for `rows`: one block per node (in order of first appearance), two blank lines apart, each
// "time value" per line for every figure's value in metrics_figures() order. Returns the node names, one per block.
std::string plot_data(const std::vector<MetricsRow>& rows, std::vector<std::string>& nodes);

// A gnuplot script that draws every figure of metrics_figures() into `out_dir` from `data_file` (plot_data's),
// one curve per node, titles starting with `title`; a figure no row of `rows` has a value for is an empty chart
// with its when_empty note. REQUIRES: out_dir and data_file hold no ' or newline; nodes is plot_data(rows)'s.
std::string plot_script(const std::string& data_file, const std::vector<MetricsRow>& rows,
                        const std::vector<std::string>& nodes, const std::string& out_dir, const std::string& title);

}  // namespace gridtrain::telemetry
