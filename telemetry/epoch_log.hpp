#pragma once
// How a training node writes each epoch out (README.md, "Training and observability"): a progress line for
// people, and a row of the metrics CSV (metrics.csv) for tools and plots.
//
// CSV: one row per epoch per node, with the header
//   time_s,node,epoch,samples,samples_per_s,loss,test_accuracy,tau,rounds
// so that the files of several nodes concatenate (less their headers) into one table.

#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.hpp"
#include "learner/trainer.hpp"

namespace gridtrain::telemetry {

// "epoch E samples S samples_per_s X loss L test_accuracy A tau T rounds R" (tau "inf" when no round completed).
std::string progress_line(const learner::EpochReport& report);

// The progress line's figures as JSON fields (the json log format); tau null when no round completed.
nlohmann::json epoch_fields(const learner::EpochReport& report);

inline constexpr const char* metrics_csv_header =
    "time_s,node,epoch,samples,samples_per_s,loss,test_accuracy,tau,rounds";

// One CSV row; tau is an empty field when no round completed (plotting tools read it as missing).
std::string csv_row(const std::string& node, const learner::EpochReport& report);

// The metrics CSV of one node, or of several: the nodes of a machine that share one config write their rows into
// one file, each row naming its node (what `gridnode plot` and the demo's merged CSV expect). Each writer holds a
// shared lock on the file for as long as it is open, and a row is one append (O_APPEND, one write), so rows never
// tear or overwrite each other. The writer that finds no other truncates the file (unless `append`: --resume keeps
// the earlier run's rows) and writes the header; the others append to what it started.
class MetricsCsv {
 public:
  // Opens the file for this node's rows as above; a new or empty file gets the header.
  static Result<MetricsCsv> open(const std::string& path, bool append);

  // One row, flushed at once so that a reader (the demo) sees it while the node runs.
  void write(const std::string& node, const learner::EpochReport& report);

 private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Close> file_;
};

}  // namespace gridtrain::telemetry
