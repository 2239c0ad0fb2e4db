#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

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

}  // namespace gridtrain::telemetry
