// Real gridnode processes on loopback, one of them stalled with SIGSTOP: the others keep averaging at the quorum,
// and a node stalled past the failure detector's timeout comes back by itself.

#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include "tests/app/probe_cluster.hpp"

using namespace gridtrain::testing;

namespace {

// One line of four (dims 1), a quorum of θ acting at once (fraction), and a failure detector slow enough (30 s)
// that a 10 s stall is met by the quorum alone, not by taking the node out.
std::string quorum_config(double theta) {
  return R"(cluster:
  heartbeat_ms: 200
  connection_timeout_ms: 30000
grid:
  dims: 1
allreduce:
  quorum: fraction
  reduce_threshold: )" +
         std::to_string(theta) + "\n  complete_threshold: " + std::to_string(theta) +
         "\n  advance_threshold: " + std::to_string(theta) + R"(
  elastic_rate: 0.5
learner:
  kind: probe
  probe_floats: 1000
)";
}

// The rounds every node but `skip` has done, summed, and when they were read; nothing if a status failed.
struct Reading {
  double seconds = 0;
  std::uint64_t rounds = 0;
};

std::optional<Reading> read_rounds(const Cluster& cluster, std::size_t nodes, const std::string& skip) {
  const json status = cluster.status();
  const auto rounds = rounds_by_address(status);
  if (rounds.size() != nodes) return std::nullopt;
  Reading r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  for (const auto& [address, n] : rounds)
    if (address != skip) r.rounds += n;
  return r;
}

// Rounds per second of the nodes but `skip`, over about `window`.
double round_rate(const Cluster& cluster, std::size_t nodes, const std::string& skip, std::chrono::seconds window) {
  std::optional<Reading> first, last;
  REQUIRE(eventually([&] { return (first = read_rounds(cluster, nodes, skip)).has_value(); }, 30s));
  std::this_thread::sleep_for(window);
  REQUIRE(eventually([&] { return (last = read_rounds(cluster, nodes, skip)).has_value(); }, 30s));
  return static_cast<double>(last->rounds - first->rounds) / (last->seconds - first->seconds);
}

// Four probe nodes at quorum θ, all averaging; node 2 (not the seed, whose process hosts the GridMaster that
// answers status) is stopped for `stop`. Returns the other three's rounds/s before and during the stop.
struct StallRates {
  double before = 0;
  double during = 0;
};

StallRates stop_one_of_four(Cluster& cluster, std::chrono::seconds stop) {
  for (double v : {10.0, 20.0, 30.0, 60.0}) cluster.start(v);
  REQUIRE(eventually(
      [&] {
        const auto rounds = rounds_by_address(cluster.status());
        return rounds.size() == 4 && std::all_of(rounds.begin(), rounds.end(), [](auto& r) { return r.second > 0; });
      },
      60s));
  const std::string victim_address = cluster.address(2);
  StallRates r;
  r.before = round_rate(cluster, 4, victim_address, 3s);
  cluster.node(2).signal(SIGSTOP);
  std::this_thread::sleep_for(2s);  // the rounds it was part of are retired (or stuck, at θ = 1)
  r.during = round_rate(cluster, 4, victim_address, stop - 4s);
  std::this_thread::sleep_for(2s);
  cluster.node(2).signal(SIGCONT);
  return r;
}

}  // namespace

TEST_CASE("with a quorum of 3 of 4, a node stopped for 10 s does not stop the others, and catches up after") {
  Cluster cluster(quorum_config(0.75));
  const StallRates rates = stop_one_of_four(cluster, 10s);
  MESSAGE("θ = 0.75, rounds/s of the other three: " << rates.before << " before, " << rates.during
                                                    << " while one node was stopped");
  CHECK(rates.during > 0);
  // Going on, against stalled: the θ = 1 case below falls under a tenth of its rate. Not a speed figure: alone the
  // others ran 1.2-1.3x faster during the stop (the stopped node frees a core), under ctest -j2 beside the training
  // tests once 0.45x, which the half this asked for failed.
  CHECK(rates.during >= rates.before / 10);

  // Back: still a member (30 s of silence were not reached), running rounds again within 10 s, and all four agree.
  const std::string victim_address = cluster.address(2);
  const auto at_cont = rounds_by_address(cluster.status())[victim_address];
  const auto resumed = std::chrono::steady_clock::now();
  CHECK(eventually([&] { return rounds_by_address(cluster.status())[victim_address] > at_cont; }, 10s));
  MESSAGE("the stopped node ran rounds again "
          << std::chrono::duration<double>(std::chrono::steady_clock::now() - resumed).count() << " s after SIGCONT");
  double mean = 0;
  json last;
  CHECK_MESSAGE(eventually(
                    [&] {
                      last = cluster.status();
                      return agree(last, 4, 1e-3, &mean);
                    },
                    60s),
                "last status: " << last.dump());
}

TEST_CASE("with θ = 1 (exact averages), a stopped node stalls its line until it resumes") {
  // What the quorum buys: the same stall at θ = 1 stops the line, since every round waits for every peer.
  Cluster cluster(quorum_config(1.0));
  const StallRates rates = stop_one_of_four(cluster, 6s);
  MESSAGE("θ = 1, rounds/s of the other three: " << rates.before << " before, " << rates.during
                                                 << " while one node was stopped");
  CHECK(rates.during < rates.before / 10);
  const std::string victim_address = cluster.address(2);
  const auto at_cont = rounds_by_address(cluster.status())[victim_address];
  CHECK(eventually([&] { return rounds_by_address(cluster.status())[victim_address] > at_cont; }, 10s));
}

TEST_CASE("a node stalled past the connection timeout is taken out, then rejoins by itself and warm-starts") {
  Cluster cluster;  // the probe config: its failure detector takes a node out after 1 s of silence
  for (double v : {10.0, 20.0, 30.0, 60.0}) cluster.start(v);
  REQUIRE(eventually([&] { return cluster.status()["nodes"].size() == 4; }, 60s));
  const std::size_t victim = 3;
  const std::string victim_address = cluster.address(victim);

  cluster.node(victim).signal(SIGSTOP);
  // The failure detector takes it out after 1 s of silence; the others go on in a grid of three.
  REQUIRE(eventually(
      [&] {
        const json s = cluster.status();  // null while no answer came (a status in the middle of the change)
        return s.is_object() && s["nodes"].size() == 3 && !rounds_by_address(s).count(victim_address);
      },
      30s));
  std::this_thread::sleep_for(2s);
  cluster.node(victim).signal(SIGCONT);
  const auto resumed = std::chrono::steady_clock::now();

  // It notices, asks to be let back in, copies a line peer's model, and averages again.
  json last;
  const bool back = eventually(
      [&] {
        last = cluster.status();
        const auto rounds = rounds_by_address(last);
        return rounds.size() == 4 && rounds.count(victim_address) && rounds.at(victim_address) > 0;
      },
      30s);
  REQUIRE_MESSAGE(back, "last status: " << last.dump() << "\nits output:\n" << cluster.node(victim).output());
  MESSAGE("back in the grid, running rounds, "
          << std::chrono::duration<double>(std::chrono::steady_clock::now() - resumed).count() << " s after SIGCONT");
  CHECK(cluster.node(victim).output().find("rejoined the cluster") != std::string::npos);
  // The copy is asked for once it is back in; the status may show it back (with its earlier rounds) before.
  CHECK(eventually(
      [&] { return cluster.node(victim).output().find("warm start: copied the model of node") != std::string::npos; },
      10s));
  CHECK(cluster.node(victim).running());
  double mean = 0;
  CHECK(eventually(
      [&] {
        last = cluster.status();
        return agree(last, 4, 1e-3, &mean);
      },
      60s));
}

TEST_CASE("a node that joins through a seed stalled past the gate's handshake limit asks again and gets in") {
  // Its first dial waits the gate's 5 s for an answer and times out; its join (10 s) asks again, and the seed,
  // resumed at 6 s, lets it in. It once gave up at the first timeout: in CI, a seed loaded by a flood of
  // connections took longer than the connection timeout for CAF's handshake, and the joiner exited "unreachable".
  Cluster cluster;
  cluster.start(10.0);
  REQUIRE(eventually([&] { return cluster.status()["nodes"].size() == 1; }, 30s));
  cluster.node(0).signal(SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  const std::size_t joiner = cluster.start(20.0);
  std::this_thread::sleep_until(stopped + std::chrono::seconds(6));
  cluster.node(0).signal(SIGCONT);
  const bool joined = eventually(
      [&] { return cluster.node(joiner).output().find("joined the cluster") != std::string::npos; }, 15s);
  REQUIRE_MESSAGE(joined, "the joiner's output:\n" << cluster.node(joiner).output());
  CHECK(cluster.node(joiner).output().find("asking them again") != std::string::npos);
  double mean = 0;
  CHECK(eventually([&] { return agree(cluster.status(), 2, 1e-3, &mean); }, 30s));
}
