#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "telemetry/metrics_plot.hpp"

namespace gridtrain::telemetry {

namespace {

std::string write(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

}  // namespace

TEST_CASE("a metrics CSV of several nodes is read row by row, headers skipped, an empty tau kept as missing") {
  const std::string path = write("gridtrain-metrics-plot-test.csv",
                                 "time_s,node,epoch,samples,samples_per_s,loss,test_accuracy,tau,rounds\n"
                                 "1.5,a,1,100,50.5,0.9,0.5,2.5,10\n"
                                 "1.7,b,1,100,48,0.95,0.45,,0\n"
                                 "time_s,node,epoch,samples,samples_per_s,loss,test_accuracy,tau,rounds\n"
                                 "3,a,2,200,51,0.7,0.6,2.4,21\n");
  auto rows = read_metrics_csv(path);
  REQUIRE(rows.ok());
  REQUIRE(rows.value().size() == 3);
  CHECK(rows.value()[0].node == "a");
  CHECK(rows.value()[1].samples_per_s == 48);
  CHECK(std::isnan(rows.value()[1].tau));
  CHECK(rows.value()[2].epoch == 2);

  std::vector<std::string> nodes;
  const std::string data = plot_data(rows.value(), nodes);
  CHECK(nodes == std::vector<std::string>{"a", "b"});
  // Block 0 (node a) holds its two rows, block 1 (node b) its one, whose tau is NaN.
  CHECK(data.find("# node a\n1.5 0.5 0.9 50.5 2.5\n3 0.6 0.7 51 2.4\n\n\n# node b\n1.7 0.45 0.95 48 NaN\n") == 0);
  const std::string script = plot_script("/tmp/d.txt", rows.value(), nodes, "/tmp/out", "gridtrain");
  for (const auto& figure : metrics_figures()) CHECK(script.find("/tmp/out/" + figure.file) != std::string::npos);
  CHECK(script.find("index 1 using 1:5") != std::string::npos);  // node b's tau
  CHECK(script.find("no elastic update") == std::string::npos);

  // Nobody averaged (one node alone): tau has no point, which gnuplot refuses to plot; its chart says why instead,
  // and the other three are drawn as ever.
  std::vector<MetricsRow> alone = rows.value();
  for (MetricsRow& r : alone) r.tau = std::nan("");
  const std::string single = plot_script("/tmp/d.txt", alone, nodes, "/tmp/out", "gridtrain");
  CHECK(single.find("using 1:5") == std::string::npos);
  CHECK(single.find("plot NaN notitle") != std::string::npos);
  CHECK(single.find("no elastic update in any epoch") != std::string::npos);
  CHECK(single.find("index 1 using 1:4") != std::string::npos);  // samples/s: still every node's curve
  std::remove(path.c_str());
}

TEST_CASE("a metrics CSV that is not one is refused with its line, before anything reaches gnuplot") {
  auto error_of = [](const std::string& text) {
    const std::string path = write("gridtrain-metrics-plot-bad.csv", text);
    auto rows = read_metrics_csv(path);
    std::remove(path.c_str());
    REQUIRE_FALSE(rows.ok());
    return rows.error();
  };
  CHECK(error_of("").message == "the metrics CSV has no rows");
  const Error short_row = error_of("1,a,1\n");
  CHECK(short_row.line == 1);
  CHECK(short_row.message.find("expected 9 fields") == 0);
  CHECK(error_of("1,a,1,100,50,0.9,0.5,2.5,10\n2,a,2,100,50,nan,0.5,2.5,10\n").line == 2);  // NaN loss
  CHECK(error_of("1,a b,1,100,50,0.9,0.5,2.5,10\n").message.find("not plain") != std::string::npos);
  CHECK(error_of("1,a,one,100,50,0.9,0.5,2.5,10\n").message.find("epoch") != std::string::npos);
  CHECK_FALSE(read_metrics_csv("/nonexistent/metrics.csv").ok());
}

}  // namespace gridtrain::telemetry
