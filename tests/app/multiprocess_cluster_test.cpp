// Real gridnode processes on loopback (issue 3): they converge, a late node is placed, a killed node is removed
// while the rest go on, and a node with another model is turned away. Every process is started by this test,
// listens on a port the system picks, and is killed by PID when its test ends, pass or fail.

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/app/process_harness.hpp"

using gridtrain::testing::ChildProcess;
using gridtrain::testing::eventually;
using gridtrain::testing::run_command;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

const std::string gridnode = GRIDNODE_PATH;

// A probe cluster: each node holds probe_floats copies of its own value and does no training, so the cluster
// mean of the values is what elastic averaging must converge to.
constexpr const char* kProbeConfig = R"(cluster:
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
  Cluster() {
    dir_ = std::filesystem::temp_directory_path() / ("gridtrain-mp-" + std::to_string(::getpid()) + "-" +
                                                     std::to_string(counter()++));
    std::filesystem::create_directories(dir_);
    config_ = (dir_ / "cluster.yaml").string();
    std::ofstream(config_) << kProbeConfig;
  }
  ~Cluster() {
    nodes_.clear();  // kills every process still running
    std::filesystem::remove_all(dir_);
  }

  // Starts a node holding `value`; the first one bootstraps the cluster. Returns its index.
  std::size_t start(double value, std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"run", "--config", config_, "--listen", "127.0.0.1:0", "--set",
                                  "learner.probe_value=" + std::to_string(value)};
    if (!seed_.empty()) {
      args.push_back("--seed");
      args.push_back(seed_);
    }
    args.insert(args.end(), extra.begin(), extra.end());
    auto started = ChildProcess::start(gridnode, args);
    REQUIRE_MESSAGE(started.ok(), started.error().to_string());
    nodes_.push_back(std::move(started).value());
    auto& node = *nodes_.back();
    auto line = node.wait_for_line("listening on ", 30s);
    REQUIRE_MESSAGE(line.has_value(), "node did not start: " << node.output());
    std::string address = line->substr(line->find("listening on ") + 13);
    addresses_.push_back(address);
    if (seed_.empty()) seed_ = address;
    return nodes_.size() - 1;
  }

  ChildProcess& node(std::size_t i) { return *nodes_[i]; }
  const std::string& address(std::size_t i) const { return addresses_[i]; }
  const std::string& config() const { return config_; }
  const std::string& seed() const { return seed_; }

  // `gridnode status --json` against the seed; null if it failed.
  json status() const {
    auto r = run_command(gridnode, {"status", "--seed", seed_, "--json"}, 20s);
    if (r.exit_code != 0) return json();
    try {
      return json::parse(r.output);
    } catch (const json::exception&) {
      return json();
    }
  }

 private:
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
bool agree(const json& status, std::size_t nodes, double spread, double* mean) {
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

std::map<std::string, std::uint64_t> rounds_by_address(const json& status) {
  std::map<std::string, std::uint64_t> rounds;
  if (status.is_object())
    for (const auto& n : status["nodes"])
      rounds[n["address"].get<std::string>()] = n["rounds_done"].get<std::uint64_t>();
  return rounds;
}

}  // namespace

TEST_CASE("four gridnode processes converge to the mean of their values") {
  Cluster cluster;
  const std::vector<double> values{10, 20, 30, 60};
  for (double v : values) cluster.start(v);
  json last;
  double consensus = 0;
  bool converged = eventually(
      [&] {
        last = cluster.status();
        return agree(last, 4, 1e-4, &consensus);
      },
      60s);
  REQUIRE_MESSAGE(converged, "last status: " << last.dump());
  // Rounds that overlap (k in flight, two dimensions) keep the sum: each peer adds alpha * (mean - fetched).
  // Only a round that one peer applies and another abandons (the grid re-forms while nodes join) can move the
  // mean, by a little; the in-process tests, which schedule rounds, hold it exactly.
  MESSAGE("consensus " << consensus << ", mean of the starting values 30");
  CHECK(consensus == doctest::Approx(30.0).epsilon(0.005));
  REQUIRE(last.is_object());
  CHECK(last["dims"] == 2);
  CHECK(last["shape"] == json::array({2, 2}));
}

TEST_CASE("a node that joins a running cluster is placed in the grid") {
  Cluster cluster;
  for (double v : {1.0, 2.0, 3.0, 4.0}) cluster.start(v);
  REQUIRE(eventually([&] { return cluster.status()["nodes"].size() == 4; }, 60s));
  auto before = cluster.status();

  auto fifth = cluster.start(5.0);
  json last;
  bool placed = eventually(
      [&] {
        last = cluster.status();
        if (!last.is_object() || last["nodes"].size() != 5) return false;
        for (const auto& n : last["nodes"])
          if (n["address"] == cluster.address(fifth)) return n["coords"].size() == 2;
        return false;
      },
      60s);
  CHECK_MESSAGE(placed, "last status: " << last.dump());
  CHECK(last["layout_version"].get<std::uint64_t>() > before["layout_version"].get<std::uint64_t>());
  CHECK(last["shape"] == json::array({3, 3}));
}

TEST_CASE("a killed node is removed from the grid and the survivors' rounds go on") {
  Cluster cluster;
  for (double v : {1.0, 2.0, 3.0, 4.0, 5.0}) cluster.start(v);
  json last;
  REQUIRE(eventually(
      [&] {
        last = cluster.status();
        auto rounds = rounds_by_address(last);
        if (rounds.size() != 5) return false;
        for (auto& [address, r] : rounds)
          if (r == 0) return false;
        return true;
      },
      60s));

  // The victim: not the seed (it hosts the GridMaster) and, if there is one, a node that masters no line.
  std::size_t victim = 1;
  for (const auto& n : last["nodes"]) {
    if (n["masters"].empty() && n["address"] != cluster.seed()) {
      for (std::size_t i = 1; i < 5; ++i)
        if (cluster.address(i) == n["address"]) victim = i;
      break;
    }
  }
  const std::string victim_address = cluster.address(victim);
  auto at_kill = rounds_by_address(last);
  auto killed_at = std::chrono::steady_clock::now();
  cluster.node(victim).signal(SIGKILL);

  const auto version_at_kill = last["layout_version"].get<std::uint64_t>();
  // The survivors' rounds go on within 3 s of the kill, in a grid without the victim. (The shape may stay 3x3:
  // the grid shrinks its side with hysteresis, not at the first leave.)
  bool went_on = eventually(
      [&] {
        last = cluster.status();
        auto rounds = rounds_by_address(last);
        if (rounds.size() != 4 || rounds.count(victim_address)) return false;
        for (auto& [address, r] : rounds)
          if (r <= at_kill[address]) return false;
        return true;
      },
      30s);
  auto took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  REQUIRE_MESSAGE(went_on, "last status: " << last.dump());
  MESSAGE("rounds went on " << took << " s after the kill");
  CHECK(took < 3.0);
  CHECK(last["nodes"].size() == 4);
  CHECK(last["layout_version"].get<std::uint64_t>() > version_at_kill);
}

TEST_CASE("a node with a different model is rejected with exit code 3 and a reason") {
  Cluster cluster;
  cluster.start(1.0);
  cluster.start(2.0);
  auto started = ChildProcess::start(gridnode, {"run", "--config", cluster.config(), "--listen", "127.0.0.1:0",
                                                "--seed", cluster.seed(), "--set", "learner.probe_floats=999"});
  REQUIRE(started.ok());
  ChildProcess& stranger = *started.value();
  auto code = stranger.wait_exit(60s);
  REQUIRE_MESSAGE(code.has_value(), stranger.output());
  CHECK(*code == 3);
  CHECK(stranger.output().find("error: ") != std::string::npos);
  CHECK(stranger.output().find("model") != std::string::npos);
}
