#pragma once
// Real gridnode processes for the multi-process tests: a probe cluster of them, and how to read its status. Every
// process is started by the test, listens on a port the system picks, and is killed by PID when the cluster
// object goes away, pass or fail.

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/app/process_harness.hpp"
#include "tests/base/require_ok.hpp"

namespace gridtrain::testing {

using nlohmann::json;
using namespace std::chrono_literals;

inline const std::string gridnode = GRIDNODE_PATH;

// A probe cluster: each node holds probe_floats copies of its own value and does no training, so the cluster
// mean of the values is what elastic averaging must converge to.
inline constexpr const char* kProbeConfig = R"(cluster:
  heartbeat_ms: 100
  connection_timeout_ms: 1000
grid:
  dims: 2
allreduce:
  elastic_rate: 0.5
  max_chunk_floats: 4096
learner:
  kind: probe
  probe_floats: 10000
)";

class Cluster {
 public:
  explicit Cluster(const std::string& yaml = kProbeConfig) {
    dir_ = std::filesystem::temp_directory_path() / ("gridtrain-mp-" + std::to_string(::getpid()) + "-" +
                                                     std::to_string(counter()++));
    std::filesystem::create_directories(dir_);
    config_ = (dir_ / "cluster.yaml").string();
    std::ofstream(config_) << yaml;
  }
  ~Cluster() {
    nodes_.clear();  // kills every process still running
    std::filesystem::remove_all(dir_);
  }

  // Starts a node holding `value`; the first one bootstraps the cluster. Returns its index.
  std::size_t start(double value, std::vector<std::string> extra = {}) {
    return launch(value, "127.0.0.1:0", !seed_.empty(), std::move(extra));
  }
  // Starts a node holding `value` at `listen` (a dead node's address, say): it joins through the seed, or with
  // `bootstrap` starts a cluster of its own. Returns its index.
  std::size_t start_at(const std::string& listen, double value, bool bootstrap) {
    return launch(value, listen, !bootstrap, {});
  }

  ChildProcess& node(std::size_t i) { return *nodes_[i]; }
  const std::string& address(std::size_t i) const { return addresses_[i]; }
  std::size_t address_count() const { return addresses_.size(); }
  const std::string& config() const { return config_; }
  const std::string& seed() const { return seed_; }

  // The seed (a list, tried in order) that later starts and status() use.
  void set_seed(std::string seed) { seed_ = std::move(seed); }

  // `gridnode status --json` against the seed (or `through`); null if it failed.
  json status(const std::string& through = "") const {
    auto r = run_command(gridnode, {"status", "--seed", through.empty() ? seed_ : through, "--json"}, 20s);
    if (r.exit_code != 0) return json();
    try {
      return json::parse(r.output);
    } catch (const json::exception&) {
      return json();
    }
  }

 private:
  std::size_t launch(double value, const std::string& listen, bool join, std::vector<std::string> extra) {
    std::vector<std::string> args{"run", "--config", config_, "--listen", listen, "--set",
                                  "learner.probe_value=" + std::to_string(value)};
    if (join) {
      args.push_back("--seed");
      args.push_back(seed_);
    }
    args.insert(args.end(), extra.begin(), extra.end());
    auto started = ChildProcess::start(gridnode, args);
    REQUIRE_OK(started);
    nodes_.push_back(std::move(started).value());
    auto& node = *nodes_.back();
    auto line = node.wait_for_line("listening on ", 30s);
    REQUIRE_MESSAGE(line.has_value(), "node did not start: " << node.output());
    std::string address = line->substr(line->find("listening on ") + 13);
    addresses_.push_back(address);
    if (seed_.empty()) seed_ = address;
    return nodes_.size() - 1;
  }

  static int& counter() {
    static int n = 0;
    return n;
  }
  std::filesystem::path dir_;
  std::string config_;
  std::string seed_;
  std::vector<std::unique_ptr<ChildProcess>> nodes_;
  std::vector<std::string> addresses_;
};

// Whether `nodes` nodes report, and all their values lie within `spread` of each other; their mean in *mean.
inline bool agree(const json& status, std::size_t nodes, double spread, double* mean) {
  if (!status.is_object() || status["nodes"].size() != nodes) return false;
  double lo = 1e300, hi = -1e300, sum = 0;
  for (const auto& n : status["nodes"]) {
    if (!n["param_mean"].is_number()) return false;
    double v = n["param_mean"].get<double>();
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
  }
  *mean = sum / static_cast<double>(nodes);
  return hi - lo <= spread;
}

inline std::map<std::string, std::uint64_t> rounds_by_address(const json& status) {
  std::map<std::string, std::uint64_t> rounds;
  if (status.is_object())
    for (const auto& n : status["nodes"])
      rounds[n["address"].get<std::string>()] = n["rounds_done"].get<std::uint64_t>();
  return rounds;
}

}  // namespace gridtrain::testing
