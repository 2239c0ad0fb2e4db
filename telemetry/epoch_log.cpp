#include "telemetry/epoch_log.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gridtrain::telemetry {

std::string progress_line(const learner::EpochReport& r) {
  char tau[32];
  if (std::isfinite(r.tau))
    std::snprintf(tau, sizeof tau, "%.2f", r.tau);
  else
    std::snprintf(tau, sizeof tau, "inf");
  char line[256];
  std::snprintf(line, sizeof line,
                "epoch %d samples %llu samples_per_s %.0f loss %.4f test_accuracy %.4f tau %s rounds %llu", r.epoch,
                static_cast<unsigned long long>(r.samples), r.samples_per_s, r.loss, r.test_accuracy, tau,
                static_cast<unsigned long long>(r.rounds));
  std::string out = line;
  // Only where the learner waited (allreduce.staleness_bound): the line stays as it was for everyone else.
  if (r.waited_s > 0) {
    char waited[48];
    std::snprintf(waited, sizeof waited, " waited_s %.2f", r.waited_s);
    out += waited;
  }
  return out;
}

std::string csv_row(const std::string& node, const learner::EpochReport& r) {
  char tau[32];
  if (std::isfinite(r.tau))
    std::snprintf(tau, sizeof tau, "%.3f", r.tau);
  else
    tau[0] = '\0';
  char row[512];
  std::snprintf(row, sizeof row, "%.3f,%s,%d,%llu,%.1f,%.5f,%.5f,%s,%llu", r.time_s, node.c_str(), r.epoch,
                static_cast<unsigned long long>(r.samples), r.samples_per_s, r.loss, r.test_accuracy, tau,
                static_cast<unsigned long long>(r.rounds));
  return row;
}

Result<MetricsCsv> MetricsCsv::open(const std::string& path, bool append) {
  const auto failed = [&](const char* what) {
    return Error{.source = path, .key = "metrics.csv", .message = std::string(what) + ": " + std::strerror(errno)};
  };
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return failed("cannot write");
  MetricsCsv csv;
  csv.file_.reset(::fdopen(fd, "a"));
  if (!csv.file_) {
    const Error e = failed("cannot write");
    ::close(fd);
    return e;
  }
  // Alone (an exclusive lock is free): start the file. Then, like every other writer, keep a shared lock, which
  // tells a writer that opens it later that this one is still writing.
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
    if (!append && ::ftruncate(fd, 0) != 0) return failed("cannot truncate");
    struct stat st {};
    if (::fstat(fd, &st) != 0) return failed("cannot read its size");
    if (st.st_size == 0) {
      std::fprintf(csv.file_.get(), "%s\n", metrics_csv_header);
      if (std::fflush(csv.file_.get()) != 0) return failed("cannot write");
    }
  } else if (errno != EWOULDBLOCK) {
    return failed("cannot lock");
  }
  // Blocks only while a writer that was alone holds the exclusive lock, to write the header.
  if (::flock(fd, LOCK_SH) != 0) return failed("cannot lock");
  return csv;
}

void MetricsCsv::write(const std::string& node, const learner::EpochReport& report) {
  std::fprintf(file_.get(), "%s\n", csv_row(node, report).c_str());
  std::fflush(file_.get());
}

nlohmann::json epoch_fields(const learner::EpochReport& r) {
  return {{"epoch", r.epoch},
          {"samples", r.samples},
          {"samples_per_s", r.samples_per_s},
          {"loss", r.loss},
          {"test_accuracy", r.test_accuracy},
          {"tau", std::isfinite(r.tau) ? nlohmann::json(r.tau) : nlohmann::json()},
          {"rounds", r.rounds},
          {"waited_s", r.waited_s}};
}

}  // namespace gridtrain::telemetry
