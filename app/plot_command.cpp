// gridnode plot: the metrics CSV's figures as PNGs, drawn by gnuplot (telemetry/metrics_plot.hpp).

#include <filesystem>
#include <fstream>
#include <iostream>

#include "app/child_process.hpp"
#include "app/commands.hpp"
#include "telemetry/metrics_plot.hpp"

namespace gridtrain::app {

Status draw_metrics_plots(const std::string& csv, const std::string& out_dir, const std::string& title) {
  auto rows = telemetry::read_metrics_csv(csv);
  if (!rows) return rows.error();
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Error{.source = out_dir, .message = "cannot create the folder: " + ec.message()};
  const std::string dir = std::filesystem::absolute(out_dir).lexically_normal().string();
  // The folder is written into gnuplot's script between single quotes.
  if (dir.find_first_of("'\n") != std::string::npos)
    return Error{.source = out_dir, .message = "the folder's path holds a quote or a newline, which gnuplot cannot take"};
  std::vector<std::string> nodes;
  const std::string data = dir + "/plot-data.txt", script = dir + "/plot.gp";
  std::ofstream(data) << telemetry::plot_data(rows.value(), nodes);
  std::ofstream(script) << telemetry::plot_script(data, rows.value(), nodes, dir, title);
  const auto plotted = run_command("/usr/bin/env", {"gnuplot", script}, std::chrono::seconds(60));
  if (plotted.exit_code == 127)
    return Error{.key = "gnuplot", .message = "gnuplot is not installed (Debian: apt-get install gnuplot-nox)"};
  if (plotted.exit_code != 0)
    return Error{.source = script, .key = "gnuplot",
                 .message = "gnuplot failed (exit " + std::to_string(plotted.exit_code) + "): " + plotted.output};
  return {};
}

int plot(const PlotArgs& args) {
  const Status drawn = draw_metrics_plots(args.csv, args.out, "gridtrain");
  if (!drawn.ok()) return fail(drawn.error().key == "gnuplot" ? kInternal : kBadInput, drawn.error().to_string());
  for (const auto& figure : telemetry::metrics_figures())
    std::cout << "wrote " << (std::filesystem::path(args.out) / figure.file).string() << "\n";
  return kOk;
}

}  // namespace gridtrain::app
