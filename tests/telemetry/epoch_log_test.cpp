#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "telemetry/epoch_log.hpp"

namespace gridtrain::telemetry {

TEST_CASE("the progress line and the CSV row carry every field, in a stable order") {
  learner::EpochReport r{.epoch = 3, .samples = 4500, .time_s = 12.5, .samples_per_s = 1500, .loss = 0.25,
                        .test_loss = 0.3, .test_accuracy = 0.875, .tau = 2.5, .rounds = 40};
  CHECK(progress_line(r) ==
        "epoch 3 samples 4500 samples_per_s 1500 loss 0.2500 test_accuracy 0.8750 tau 2.50 rounds 40");
  CHECK(csv_row("n1", r) == "12.500,n1,3,4500,1500.0,0.25000,0.87500,2.500,40");
  r.tau = INFINITY;
  CHECK(progress_line(r).find("tau inf rounds") != std::string::npos);
  CHECK(csv_row("n1", r).find(",0.87500,,40") != std::string::npos);
}

TEST_CASE("a learner that waited at its staleness bound says how long, at the end of the line; the CSV is unchanged") {
  learner::EpochReport r{.epoch = 3, .samples = 4500, .time_s = 12.5, .samples_per_s = 1500, .loss = 0.25,
                        .test_loss = 0.3, .test_accuracy = 0.875, .tau = 2.5, .rounds = 40, .waited_s = 1.25};
  CHECK(progress_line(r) ==
        "epoch 3 samples 4500 samples_per_s 1500 loss 0.2500 test_accuracy 0.8750 tau 2.50 rounds 40 waited_s 1.25");
  CHECK(csv_row("n1", r) == "12.500,n1,3,4500,1500.0,0.25000,0.87500,2.500,40");
  CHECK(epoch_fields(r)["waited_s"] == 1.25);
}

TEST_CASE("a metrics CSV gets its header once, and a row per epoch, readable while the node runs") {
  const auto path = std::filesystem::temp_directory_path() / ("gridtrain-csv-" + std::to_string(::getpid()) + ".csv");
  const learner::EpochReport r{.epoch = 1, .samples = 10, .time_s = 1, .test_accuracy = 0.5, .tau = 1, .rounds = 2};
  {
    auto csv = MetricsCsv::open(path.string(), false);
    REQUIRE(csv.ok());
    csv.value().write("a", r);
    std::ifstream now(path);  // flushed: the demo reads the file while the node writes it
    std::stringstream text;
    text << now.rdbuf();
    CHECK(text.str() == std::string(metrics_csv_header) + "\n" + csv_row("a", r) + "\n");
  }
  {
    auto resumed = MetricsCsv::open(path.string(), true);  // --resume appends, without a second header
    REQUIRE(resumed.ok());
    resumed.value().write("a", r);
  }
  std::ifstream in(path);
  std::string line;
  int lines = 0, headers = 0;
  while (std::getline(in, line)) ++lines, headers += line == metrics_csv_header;
  CHECK(lines == 3);
  CHECK(headers == 1);
  std::filesystem::remove(path);
  const auto unwritable = MetricsCsv::open("/nonexistent-dir/m.csv", false);
  REQUIRE_FALSE(unwritable.ok());
  CHECK(unwritable.error().key == "metrics.csv");
}

TEST_CASE("nodes that share a metrics CSV each add their rows to it; the first alone starts the file afresh") {
  // Each MetricsCsv is its own open file with its own lock, as two processes' are. Before, the second node's open
  // truncated the first's rows, and both wrote at their own offsets over each other's.
  const auto path =
      std::filesystem::temp_directory_path() / ("gridtrain-shared-csv-" + std::to_string(::getpid()) + ".csv");
  std::ofstream(path) << "left over from an earlier run\n";
  const auto rows_of = [&] {
    std::ifstream in(path);
    std::vector<std::string> rows;
    for (std::string line; std::getline(in, line);) rows.push_back(line);
    return rows;
  };
  const learner::EpochReport r{.epoch = 1, .samples = 10, .time_s = 1, .test_accuracy = 0.5, .tau = 1, .rounds = 2};
  {
    auto first = MetricsCsv::open(path.string(), false);
    REQUIRE(first.ok());
    first.value().write("a", r);
    auto second = MetricsCsv::open(path.string(), false);  // a second node, started while the first writes
    REQUIRE(second.ok());
    second.value().write("b", r);
    first.value().write("a", r);
    CHECK(rows_of() == std::vector<std::string>{metrics_csv_header, csv_row("a", r), csv_row("b", r), csv_row("a", r)});
  }
  // Both closed: the next run's first node is alone again, and starts the file.
  {
    auto next = MetricsCsv::open(path.string(), false);
    REQUIRE(next.ok());
    next.value().write("c", r);
  }
  CHECK(rows_of() == std::vector<std::string>{metrics_csv_header, csv_row("c", r)});
  std::filesystem::remove(path);
}

}  // namespace gridtrain::telemetry
