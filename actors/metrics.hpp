#pragma once
// Metrics of a training node (DESIGN.md, "Observability"): the per-epoch CSV file (metrics.csv).
//
// CSV: one row per epoch per node, with the header
//   time_s,node,epoch,samples,samples_per_s,loss,test_accuracy,tau,rounds
// so that the files of several nodes concatenate (less their headers) into one table.

#include <cstdio>
#include <memory>
#include <string>

#include "actors/trainer.hpp"
#include "config/error.hpp"

namespace gridtrain::actors {

inline constexpr const char* metrics_csv_header =
    "time_s,node,epoch,samples,samples_per_s,loss,test_accuracy,tau,rounds";

class MetricsCsv {
 public:
  // Creates (or, with `append`, extends) the file; a new or empty file gets the header.
  static config::Result<MetricsCsv> open(const std::string& path, bool append);

  // One row, flushed at once so that a reader (the demo) sees it while the node runs.
  void write(const std::string& node, const EpochReport& report);

 private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Close> file_;
};

std::string csv_row(const std::string& node, const EpochReport& report);

}  // namespace gridtrain::actors
