// Real gridnode processes on loopback: they converge, a late node is placed (the grid turning 2-D), a killed node
// is removed while the rest go on, and a node with another model is turned away. Every process is started by this
// test, listens on a port the system picks, and is killed by PID when its test ends, pass or fail.

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/app/probe_cluster.hpp"
#include "tests/loopback_socket.hpp"

using namespace gridtrain::testing;

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
  // Only a round that one peer applies and another abandons (the grid re-forms while nodes join: the owner of a
  // block has applied its update, a peer whose line changed before the owner's answer came has not) can move the
  // mean; the in-process tests, which schedule rounds, hold it exactly. How far depends on how many rounds are in
  // flight when the three joins land: on a loaded machine under ASan 29.17, 29.58, 30.04 and 30.31 were seen
  // (2026-11-27), 30 within 1e-4 otherwise. A node that kept its own value (10, 20 or 60), or an average without
  // one of those three nodes, would be more than 3 away.
  MESSAGE("consensus " << consensus << ", mean of the starting values 30");
  CHECK(consensus == doctest::Approx(30.0).epsilon(0.05));
  REQUIRE(last.is_object());
  // grid.dims 2 allows two dimensions; four nodes share one line until a 3 x 3 grid can hold them connected.
  CHECK(last["dims"] == 1);
  CHECK(last["shape"] == json::array({4}));
  CHECK(last["warnings"].empty());
  for (const auto& n : last["nodes"]) CHECK(n["line_peers"] == 3);
}

TEST_CASE("a node that joins a running cluster turns the grid 2-D, and all reach one mean; with three killed it turns "
          "1-D again, and nothing of its second dimension's lines is left") {
  // Six nodes share one line; the seventh makes the layout a 3 x 3 grid, which moves everyone while they average.
  Cluster cluster;
  for (double v : {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}) cluster.start(v);
  REQUIRE(eventually([&] { return cluster.status()["nodes"].size() == 6; }, 60s));
  auto before = cluster.status();
  CHECK(before["shape"] == json::array({6}));

  auto seventh = cluster.start(7.0);
  json last;
  bool placed = eventually(
      [&] {
        last = cluster.status();
        if (!last.is_object() || last["nodes"].size() != 7) return false;
        for (const auto& n : last["nodes"])
          if (n["address"] == cluster.address(seventh)) return n["coords"].size() == 2;
        return false;
      },
      60s);
  CHECK_MESSAGE(placed, "last status: " << last.dump());
  CHECK(last["layout_version"].get<std::uint64_t>() > before["layout_version"].get<std::uint64_t>());
  CHECK(last["shape"] == json::array({3, 3}));
  double consensus = 0;
  CHECK_MESSAGE(eventually(
                    [&] {
                      last = cluster.status();
                      return agree(last, 7, 1e-4, &consensus);
                    },
                    60s),
                "last status: " << last.dump());

  // Three of seven killed at once (fewer than half; not the GridMaster's node, the seed): the layout of four is one
  // line. No line starts in the second dimension any more, so each survivor must end its lines there itself: kept,
  // their data plane dialed the dead peers' data ports every 2 s for good (and held their rounds' buffers).
  const auto rounds_at_kill = rounds_by_address(last);
  std::vector<std::string> dead_ids;
  for (const auto& n : last["nodes"])
    for (std::size_t i = 1; i <= 3; ++i)
      if (n["address"] == cluster.address(i)) dead_ids.push_back(n["id_hex"].get<std::string>());
  REQUIRE(dead_ids.size() == 3);
  for (std::size_t i = 1; i <= 3; ++i) cluster.node(i).signal(SIGKILL);
  bool one_line = eventually(
      [&] {
        last = cluster.status();
        if (!last.is_object() || last["nodes"].size() != 4 || last["dims"] != 1) return false;
        for (const auto& [address, r] : rounds_by_address(last))
          if (r <= rounds_at_kill.at(address)) return false;  // every survivor averages again
        return true;
      },
      60s);
  REQUIRE_MESSAGE(one_line, "last status: " << last.dump());
  // Dials of a dead peer's data port come every 2 s while a line holds it: a survivor that still does is one whose
  // second-dimension line was left behind. The first 3 s after the one-line layout are its grace to drop them.
  std::this_thread::sleep_for(3s);
  std::vector<std::size_t> printed;
  for (std::size_t i : {0, 4, 5, 6}) printed.push_back(cluster.node(i).output().size());
  std::this_thread::sleep_for(5s);
  for (std::size_t k = 0; k < printed.size(); ++k) {
    const std::size_t i = k == 0 ? 0 : k + 3;
    const std::string since = cluster.node(i).output().substr(printed[k]);
    for (const auto& dead : dead_ids)
      CHECK_MESSAGE(since.find("connect to node " + dead) == std::string::npos,
                    "node " << cluster.address(i) << " still dials " << dead << ":\n" << since);
  }
  // And the four still agree.
  CHECK_MESSAGE(eventually([&] { return agree(last = cluster.status(), 4, 1e-4, &consensus); }, 60s),
                "last status: " << last.dump());
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

TEST_CASE("gridnode status shows the effective shape, each node's line peers, and warns about a lone node") {
  Cluster cluster;
  cluster.start(1.0);
  auto alone = run_command(gridnode, {"status", "--seed", cluster.seed()}, 20s);
  INFO(alone.output);
  CHECK(alone.exit_code == 0);
  CHECK(alone.output.find("dims 1  shape 1") != std::string::npos);
  CHECK(alone.output.find("averages with nobody: it is the only member") != std::string::npos);

  cluster.start(2.0);
  json last;
  CHECK_MESSAGE(eventually(
                    [&] {
                      last = cluster.status();
                      return last.is_object() && last["nodes"].size() == 2 && last["warnings"].empty();
                    },
                    60s),
                "last status: " << last.dump());
  auto pair = run_command(gridnode, {"status", "--seed", cluster.seed()}, 20s);
  INFO(pair.output);
  CHECK(pair.output.find("shape 2") != std::string::npos);
  CHECK(pair.output.find("warning") == std::string::npos);
}

TEST_CASE("--seed takes a list tried in order, for run and for status; any member serves as the seed") {
  Cluster cluster;
  cluster.start(1.0);
  const auto second = cluster.start(2.0);
  // Port 1 answers nothing: the list goes on to the second node, a member that is not the GridMaster's.
  const std::string list = "127.0.0.1:1," + cluster.address(second);
  auto third = ChildProcess::start(gridnode, {"run", "--config", cluster.config(), "--listen", "127.0.0.1:0",
                                              "--seed", list, "--set", "learner.probe_value=3"});
  REQUIRE_OK(third);
  CHECK(third.value()->wait_for_line("joined the cluster as node", 30s).has_value());
  auto status = run_command(gridnode, {"status", "--seed", list, "--json"}, 20s);
  INFO(status.output);
  CHECK(status.exit_code == 0);
  CHECK(status.output.find("\"nodes\"") != std::string::npos);
  json last;
  CHECK(eventually([&] { return (last = cluster.status()).is_object() && last["nodes"].size() == 3; }, 30s));

  auto none = run_command(gridnode, {"status", "--seed", "127.0.0.1:1,127.0.0.1:2"}, 20s);
  CHECK(none.exit_code != 0);
  CHECK(none.output.find("127.0.0.1:1") != std::string::npos);
  CHECK(none.output.find("127.0.0.1:2") != std::string::npos);
  CHECK(none.output.find("127.0.0.1:1: 127.0.0.1:1") == std::string::npos);  // each seed named once in front
  // A port that accepts and never speaks (another service: the metrics port, a web server) is named for what it is
  // (it was a bare request_timeout: the request gave up as the gate's handshake did).
  const auto [silent, silent_port] = gridtrain::testing::bind_loopback();
  REQUIRE(::listen(silent, 4) == 0);
  const std::string silent_seed = "127.0.0.1:" + std::to_string(silent_port);
  auto other = run_command(gridnode, {"status", "--seed", silent_seed}, 30s);
  ::close(silent);
  INFO(other.output);
  CHECK(other.exit_code == 1);
  CHECK(other.output.find(silent_seed + " did not answer the gate handshake (not a gridtrain node") !=
        std::string::npos);
  auto bad = run_command(gridnode, {"status", "--seed", "127.0.0.1:1,,x"}, 20s);
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("--seed") != std::string::npos);
  CHECK(bad.output.find("item 2") != std::string::npos);
}
