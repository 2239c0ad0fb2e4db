#include "telemetry/metrics_plot.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>

#include "telemetry/epoch_log.hpp"

namespace gridtrain::telemetry {

namespace {

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, ',')) fields.push_back(field);
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

bool plain_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' || c == '-')) return false;
  return true;
}

}  // namespace

Result<std::vector<MetricsRow>> read_metrics_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error{.source = path, .message = "cannot read the metrics CSV"};
  std::vector<MetricsRow> rows;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line == metrics_csv_header) continue;
    auto refuse = [&](std::string why) { return Error{.source = path, .line = line_number, .message = std::move(why)}; };
    const std::vector<std::string> f = split(line);
    if (f.size() != 9)
      return refuse("expected 9 fields (" + std::string(metrics_csv_header) + "), found " + std::to_string(f.size()));
    MetricsRow row;
    row.node = f[1];
    if (!plain_name(row.node))
      return refuse("node name '" + row.node + "' is not plain (letters, digits, . _ : -, at most 64)");
    const std::pair<double*, int> numbers[] = {{&row.time_s, 0}, {&row.samples, 3}, {&row.samples_per_s, 4},
                                               {&row.loss, 5},   {&row.test_accuracy, 6}, {&row.tau, 7},
                                               {&row.rounds, 8}};
    for (const auto& [into, column] : numbers) {
      const std::string& text = f[static_cast<std::size_t>(column)];
      if (column == 7 && text.empty()) {  // τ: no round completed in that epoch
        *into = std::nan("");
        continue;
      }
      std::size_t used = 0;
      double value = 0;
      try {
        value = std::stod(text, &used);
      } catch (const std::exception&) {  // stod reports through exceptions: caught at its boundary
        used = 0;
      }
      if (used == 0 || used != text.size() || !std::isfinite(value))
        return refuse("field " + std::to_string(column + 1) + " ('" + text + "') is not a finite number");
      *into = value;
    }
    try {
      row.epoch = std::stoi(f[2]);
    } catch (const std::exception&) {
      return refuse("field 3 ('" + f[2] + "') is not an epoch number");
    }
    rows.push_back(std::move(row));
  }
  if (rows.empty()) return Error{.source = path, .message = "the metrics CSV has no rows"};
  return rows;
}

const std::vector<MetricsFigure>& metrics_figures() {
  static const std::vector<MetricsFigure> figures = {
      {"accuracy.png", "test accuracy", &MetricsRow::test_accuracy, "no values"},
      {"loss.png", "training loss", &MetricsRow::loss, "no values"},
      {"samples_per_s.png", "samples/s", &MetricsRow::samples_per_s, "no values"},
      {"tau.png", "tau (learner steps per elastic update)", &MetricsRow::tau,
       "no elastic update in any epoch of any node: tau is empty in every row (one node alone, or nodes that never "
       "averaged)"},
  };
  return figures;
}

std::string plot_data(const std::vector<MetricsRow>& rows, std::vector<std::string>& nodes) {
  nodes.clear();
  for (const MetricsRow& r : rows)
    if (std::find(nodes.begin(), nodes.end(), r.node) == nodes.end()) nodes.push_back(r.node);
  std::ostringstream out;
  out.precision(9);
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    if (n) out << "\n\n";
    out << "# node " << nodes[n] << "\n";
    for (const MetricsRow& r : rows) {
      if (r.node != nodes[n]) continue;
      out << r.time_s;
      for (const MetricsFigure& f : metrics_figures()) {
        const double v = r.*f.value;
        out << ' ';
        if (std::isfinite(v))
          out << v;
        else
          out << "NaN";
      }
      out << '\n';
    }
  }
  return out.str();
}

std::string plot_script(const std::string& data_file, const std::vector<MetricsRow>& rows,
                        const std::vector<std::string>& nodes, const std::string& out_dir, const std::string& title) {
  std::ostringstream g;
  g << "set terminal pngcairo size 900,560\n"
       "set grid\n"
       "set key outside right\n"
       "set xlabel 'time since the node started training (s)'\n";
  const auto& figures = metrics_figures();
  for (std::size_t i = 0; i < figures.size(); ++i) {
    g << "set output '" << out_dir << "/" << figures[i].file << "'\n"
      << "set title '" << title << ": " << figures[i].label << ", one curve per node'\n"
      << "set ylabel '" << figures[i].label << "'\n";
    const auto has_value = [&](const MetricsRow& r) { return std::isfinite(r.*figures[i].value); };
    if (std::none_of(rows.begin(), rows.end(), has_value)) {
      g << "set label 1 '" << figures[i].when_empty << "' at graph 0.5, 0.5 center\n"
        << "set xrange [0:1]\nset yrange [0:1]\nplot NaN notitle\nunset label 1\nset autoscale\n";
      continue;
    }
    g << "plot ";
    // Block n of the data file is node n; column 1 is the time, column 2 + i this figure's value.
    for (std::size_t n = 0; n < nodes.size(); ++n)
      g << (n ? ", " : "") << "'" << data_file << "' index " << n << " using 1:" << (2 + i)
        << " with linespoints title 'node " << nodes[n] << "'";
    g << "\n";
  }
  return g.str();
}

}  // namespace gridtrain::telemetry
