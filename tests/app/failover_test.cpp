// Real gridnode processes on loopback losing the node that hosts their GridMaster: killed, killed again right
// after a failover, or stalled (so that it is cut off, not dead, and must not go on as a second cluster).

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <chrono>
#include <csignal>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/app/probe_cluster.hpp"

using namespace gridtrain::testing;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Nodes 0..n-1 but those in `out`.
std::vector<std::size_t> all_but(std::size_t n, const std::set<std::size_t>& out) {
  std::vector<std::size_t> in;
  for (std::size_t i = 0; i < n; ++i)
    if (!out.count(i)) in.push_back(i);
  return in;
}

template <class Indexes>
std::vector<std::string> addresses(const Cluster& cluster, const Indexes& indexes) {
  std::vector<std::string> out;
  for (std::size_t i : indexes) out.push_back(cluster.address(i));
  return out;
}

std::string joined(const std::vector<std::string>& addresses) {
  std::string out;
  for (const auto& a : addresses) out += (out.empty() ? "" : ",") + a;
  return out;
}

// The index of the node whose process hosts the GridMaster, by the status's grid_master id.
std::size_t grid_master_index(const Cluster& cluster, const json& status, std::size_t started) {
  for (const auto& n : status["nodes"])
    if (n["id"] == status["grid_master"])
      for (std::size_t i = 0; i < started; ++i)
        if (cluster.address(i) == n["address"].get<std::string>()) return i;
  FAIL("no node hosts the GridMaster in " << status.dump());
  return 0;
}

// A status with `nodes` nodes, every one past `before` rounds (0 for one not in `before`).
bool all_past(const json& status, std::size_t nodes, const std::map<std::string, std::uint64_t>& before) {
  const auto rounds = rounds_by_address(status);
  if (rounds.size() != nodes) return false;
  for (const auto& [address, r] : rounds) {
    auto b = before.find(address);
    if (r <= (b == before.end() ? 0 : b->second)) return false;
  }
  return true;
}

// Every node's output, for a failure message.
std::string outputs(Cluster& cluster, std::size_t n) {
  std::string all;
  for (std::size_t i = 0; i < n; ++i) all += "node " + std::to_string(i) + ":\n" + cluster.node(i).output() + "\n";
  return all;
}

// Starts `n` probe nodes and waits until each runs rounds. Every later start and status uses every address.
json start_running(Cluster& cluster, std::size_t n) {
  std::vector<std::size_t> started;
  for (std::size_t i = 0; i < n; ++i) started.push_back(cluster.start(1.0 + static_cast<double>(i)));
  cluster.set_seed(joined(addresses(cluster, started)));
  json last;
  const bool running = eventually([&] { return all_past(last = cluster.status(), n, {}); }, 60s);
  if (!running) {
    // What the nodes missing from the status said.
    const auto listed = rounds_by_address(last);
    for (std::size_t i : started)
      if (!listed.count(cluster.address(i)))
        MESSAGE("node " << i << " is not listed; it said:\n" << cluster.node(i).output());
  }
  REQUIRE_MESSAGE(running, "last status: " << last.dump());
  return last;
}

// Polls the status until it shows an epoch above `epoch` with `nodes` nodes (a successor took over), for at most
// `limit`; `last` keeps the last status polled.
bool taken_over(Cluster& cluster, json& last, std::uint64_t epoch, std::size_t nodes, std::chrono::milliseconds limit) {
  return eventually(
      [&] {
        last = cluster.status();
        return last.is_object() && last["epoch"].get<std::uint64_t>() > epoch && last["nodes"].size() == nodes;
      },
      limit);
}

// Starts a node (probe value 10) through the cluster's seeds and requires that it is welcomed; its output.
// `others`: how many nodes were started before it, whose output a failure shows.
std::string start_joiner(Cluster& cluster, std::size_t others) {
  const std::size_t joiner = cluster.start(10.0);
  const auto welcomed = cluster.node(joiner).wait_for_line("joined the cluster", 30s);
  std::string out = cluster.node(joiner).output();
  REQUIRE_MESSAGE(welcomed.has_value(), "joiner:\n" << out << "\nothers:\n" << outputs(cluster, others));
  return out;
}

}  // namespace

TEST_CASE("kill -9 of the GridMaster's process: a survivor takes over within 5 s, rounds go on, any survivor seeds") {
  Cluster cluster;
  json last = start_running(cluster, 4);
  const auto epoch = last["epoch"].get<std::uint64_t>();
  const std::size_t gm = grid_master_index(cluster, last, 4);
  const std::vector<std::string> survivors = addresses(cluster, all_but(4, {gm}));
  cluster.set_seed(joined(survivors));
  const auto before = rounds_by_address(last);

  const auto killed = std::chrono::steady_clock::now();
  cluster.node(gm).signal(SIGKILL);
  const bool took_over = taken_over(cluster, last, epoch, 3, 5s);
  REQUIRE_MESSAGE(took_over, "last status: " << last.dump());
  MESSAGE("a successor took over " << seconds_since(killed) << " s after the kill");
  const auto new_epoch = last["epoch"].get<std::uint64_t>();
  // Rounds go on on every survivor, under the new epoch.
  CHECK_MESSAGE(eventually([&] { return all_past(last = cluster.status(), 3, before); }, 10s),
                "last status: " << last.dump());
  // Every survivor answers status for the same cluster (any member is a seed).
  for (const std::string& address : survivors) {
    const json through = cluster.status(address);
    REQUIRE(through.is_object());
    CHECK(through["epoch"].get<std::uint64_t>() == new_epoch);
    CHECK(through["nodes"].size() == 3);
  }
  // A new node joins through a survivor that does not host the new GridMaster.
  const std::size_t new_gm = grid_master_index(cluster, last, 4);
  std::string seed = survivors.front() == cluster.address(new_gm) ? survivors.back() : survivors.front();
  cluster.set_seed(seed);
  const std::size_t joiner = cluster.start(10.0);
  cluster.set_seed(joined(survivors));
  CHECK_MESSAGE(eventually([&] { return all_past(last = cluster.status(), 4, before); }, 20s),
                "last status: " << last.dump() << "\njoiner:\n" << cluster.node(joiner).output());
  CHECK(last["epoch"].get<std::uint64_t>() == new_epoch);
  CHECK(cluster.node(gm).output().find("took over") == std::string::npos);
}

// A node started right after its cluster's GridMaster was killed finds every seed between GridMasters: they answer
// "not a member" or "no GridMaster now; try again". It must ask again until one lets it in, not give up (it did:
// a restart in the middle of a failover exited at once, with that very "try again" in its error).
TEST_CASE("a node started right after its GridMaster was killed joins, asking again while the survivors elect") {
  Cluster cluster;
  json last = start_running(cluster, 3);
  const std::size_t gm = grid_master_index(cluster, last, 3);
  const std::vector<std::string> survivors = addresses(cluster, all_but(3, {gm}));
  cluster.set_seed(joined(survivors));

  cluster.node(gm).signal(SIGKILL);
  const std::string out = start_joiner(cluster, 3);  // at once: the survivors have lost their GridMaster by now
  const bool asked_again = out.find("asking them again") != std::string::npos;
  MESSAGE(std::string(asked_again ? "the joiner asked its seeds again" : "the joiner got in at its first pass"));
  CHECK_MESSAGE(eventually([&] { return (last = cluster.status()).is_object() && last["nodes"].size() == 3; }, 20s),
                "last status: " << last.dump());
}

// A node that joins while the GridMaster is stalled: its seed passes the Join on to a GridMaster that will never read
// it. Once the seed counts that GridMaster lost (the connection timeout), it tells the joiner to try again, and the
// joiner gets in under the successor the others elect. The Join used to be lost without a word: the joiner waited
// out its join timeout (10 s) and exited 1.
TEST_CASE("a node that joins while its GridMaster is stalled gets in under the successor") {
  Cluster cluster;
  json last = start_running(cluster, 3);
  const auto epoch = last["epoch"].get<std::uint64_t>();
  const std::size_t gm = grid_master_index(cluster, last, 3);
  cluster.set_seed(joined(addresses(cluster, all_but(3, {gm}))));

  cluster.node(gm).signal(SIGSTOP);
  const auto stalled = std::chrono::steady_clock::now();
  start_joiner(cluster, 3);
  MESSAGE("the joiner got in " << seconds_since(stalled) << " s after the GridMaster was stalled");
  // The two survivors and the joiner, under the successor.
  REQUIRE_MESSAGE(taken_over(cluster, last, epoch, 3, 20s), "last status: " << last.dump());
  cluster.node(gm).signal(SIGCONT);
}

// A hang seen in testing: a node that became GridMaster by election left at once while its GridMaster dialled a
// member that did not answer (here: stopped), and its process never ended (the gate's promise for the dial held the
// ended GridMaster). gridnode's 10 s shutdown guard would end it and say so; a clean exit never needs the guard.
// Without the gate's fix this test failed in 2 of 4 runs, so one run catches it about half the time;
// tests/actors/gate_test.cpp holds the cause every time.
TEST_CASE("the successor's node leaves right after its takeover while a member is stopped: its process ends cleanly") {
  Cluster cluster;
  json last = start_running(cluster, 4);
  const std::size_t gm = grid_master_index(cluster, last, 4);
  const std::size_t stopped = gm == 3 ? 2 : 3;
  cluster.node(stopped).signal(SIGSTOP);
  cluster.node(gm).signal(SIGTERM);  // leaves: the others elect a successor
  std::size_t successor = gm;
  const bool took_over = eventually(
      [&] {
        for (std::size_t i = 0; i < 4; ++i)
          if (i != gm && i != stopped && cluster.node(i).output().find("took over as the cluster") != std::string::npos)
            successor = i;
        return successor != gm;
      },
      30s);
  REQUIRE_MESSAGE(took_over, outputs(cluster, 4));  // (a stopped node is killed by PID with the rest)
  std::this_thread::sleep_for(100ms);
  cluster.node(successor).signal(SIGTERM);
  const auto code = cluster.node(successor).wait_exit(60s);
  cluster.node(stopped).signal(SIGCONT);
  INFO("the successor:\n" << cluster.node(successor).output());
  CHECK(code == std::optional<int>(0));
  CHECK(cluster.node(successor).output().find("did not shut down") == std::string::npos);
  CHECK(cluster.node(gm).wait_exit(30s) == std::optional<int>(0));
}

TEST_CASE("the successor killed right after its takeover: the next survivor takes over") {
  Cluster cluster;
  json last = start_running(cluster, 5);
  const auto epoch = last["epoch"].get<std::uint64_t>();
  std::set<std::size_t> alive{0, 1, 2, 3, 4};
  const std::size_t first = grid_master_index(cluster, last, 5);
  cluster.node(first).signal(SIGKILL);
  alive.erase(first);
  cluster.set_seed(joined(addresses(cluster, alive)));
  REQUIRE_MESSAGE(eventually(
                      [&] {
                        last = cluster.status();
                        return last.is_object() && last["epoch"].get<std::uint64_t>() > epoch;
                      },
                      10s),
                  "last status: " << last.dump());
  // At once: the members may not have confirmed the new state yet. The voters are its confirmed members.
  const std::size_t second = grid_master_index(cluster, last, 5);
  const auto second_epoch = last["epoch"].get<std::uint64_t>();
  cluster.node(second).signal(SIGKILL);
  alive.erase(second);
  cluster.set_seed(joined(addresses(cluster, alive)));
  const auto killed = std::chrono::steady_clock::now();
  REQUIRE_MESSAGE(eventually(
                      [&] {
                        last = cluster.status();
                        return last.is_object() && last["epoch"].get<std::uint64_t>() > second_epoch &&
                               last["nodes"].size() == 3;
                      },
                      10s),
                  "last status: " << last.dump());
  MESSAGE("the next survivor took over " << seconds_since(killed) << " s after the second kill");
  const std::size_t third = grid_master_index(cluster, last, 5);
  CHECK(alive.count(third));
  // Rounds go on on every survivor: past the counts of the status that showed the takeover. (This compared each
  // status with the one before, through two arguments whose order of evaluation C++ leaves open: it failed once
  // in ten runs under load, when one poll came too soon after the last.)
  const auto at_takeover = rounds_by_address(last);
  CHECK_MESSAGE(eventually([&] { return all_past(last = cluster.status(), 3, at_takeover); }, 10s),
                "last status: " << last.dump());
}

TEST_CASE("two nodes killed at once, the GridMaster's and the one that would succeed it: a majority takes over") {
  Cluster cluster;
  json last = start_running(cluster, 5);
  const auto epoch = last["epoch"].get<std::uint64_t>();
  const std::size_t gm = grid_master_index(cluster, last, 5);
  // The successor-to-be: the lowest id but the GridMaster's node.
  std::uint64_t lowest = UINT64_MAX;
  std::string lowest_address;
  for (const auto& n : last["nodes"])
    if (n["id"] != last["grid_master"] && n["id"].get<std::uint64_t>() < lowest) {
      lowest = n["id"].get<std::uint64_t>();
      lowest_address = n["address"].get<std::string>();
    }
  std::size_t successor = 0;
  for (std::size_t i = 0; i < 5; ++i)
    if (cluster.address(i) == lowest_address) successor = i;
  cluster.set_seed(joined(addresses(cluster, all_but(5, {gm, successor}))));
  const auto before = rounds_by_address(last);

  cluster.node(gm).signal(SIGKILL);
  cluster.node(successor).signal(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  const bool took_over = taken_over(cluster, last, epoch, 3, 10s);
  REQUIRE_MESSAGE(took_over, "last status: " << last.dump());
  MESSAGE("3 of 5 took over " << seconds_since(killed) << " s after the two kills");
  CHECK(eventually([&] { return all_past(last = cluster.status(), 3, before); }, 10s));
}

TEST_CASE("a GridMaster stalled past the connection timeout is cut off, not followed: it steps down and rejoins") {
  Cluster cluster;
  json last = start_running(cluster, 4);
  const auto epoch = last["epoch"].get<std::uint64_t>();
  const std::size_t gm = grid_master_index(cluster, last, 4);
  cluster.set_seed(joined(addresses(cluster, all_but(4, {gm}))));

  cluster.node(gm).signal(SIGSTOP);
  // The others cannot tell a stall from a death: three of four vote, and one of them takes over.
  // (30 s: an ASan build beside other tests once took over 15 s.)
  REQUIRE_MESSAGE(taken_over(cluster, last, epoch, 3, 30s),
                  "last status: " << last.dump() << "\n" << outputs(cluster, 4));
  const auto new_epoch = last["epoch"].get<std::uint64_t>();
  std::this_thread::sleep_for(1s);
  cluster.node(gm).signal(SIGCONT);
  // Woken, the old GridMaster reaches none of its members: it steps down rather than go on as a cluster of one,
  // and its node rejoins the cluster the others elected. There is one cluster, whoever is asked.
  const bool back = eventually(
      [&] {
        last = cluster.status();
        const json through_old = cluster.status(cluster.address(gm));
        return last.is_object() && last["nodes"].size() == 4 && last["epoch"] == new_epoch &&
               through_old.is_object() && through_old["epoch"] == new_epoch && through_old["nodes"].size() == 4;
      },
      30s);
  REQUIRE_MESSAGE(back,
                  "last status: " << last.dump() << "\nold GridMaster's node: " << gm << "\n" << outputs(cluster, 4));
  const std::string out = cluster.node(gm).output();
  CHECK(out.find("stepping down") != std::string::npos);
  CHECK(out.find("took over") == std::string::npos);
  CHECK(out.find("warm start: copied the model of node") != std::string::npos);
}

TEST_CASE("kill -9 of a random node, ten times, each restarted: rounds go on after each kill, the grid grows back") {
  Cluster cluster;
  json last = start_running(cluster, 4);
  std::vector<std::size_t> alive{0, 1, 2, 3};
  std::mt19937 random(20261123);
  std::vector<double> went_on;
  for (int kill = 0; kill < 10; ++kill) {
    const std::size_t at = std::uniform_int_distribution<std::size_t>(0, alive.size() - 1)(random);
    const std::size_t victim = alive[at];
    const bool was_gm = victim == grid_master_index(cluster, last, cluster.address_count());
    const auto before = rounds_by_address(last);
    alive.erase(alive.begin() + static_cast<std::ptrdiff_t>(at));
    cluster.set_seed(joined(addresses(cluster, alive)));
    const auto killed = std::chrono::steady_clock::now();
    cluster.node(victim).signal(SIGKILL);
    // The survivors complete rounds again, in a grid of three.
    const bool on = eventually(
        [&] {
          last = cluster.status();
          return all_past(last, 3, before) && !rounds_by_address(last).count(cluster.address(victim));
        },
        20s);
    REQUIRE_MESSAGE(on, "kill " << kill << std::string(was_gm ? " (the GridMaster's node)" : "") << "; last status: "
                                << last.dump());
    went_on.push_back(seconds_since(killed));
    CHECK(went_on.back() < 3.0);  // the bound; typically a tenth of it
    MESSAGE("kill " << kill << std::string(was_gm ? " of the GridMaster's node" : "") << ": rounds again after "
                    << went_on.back() << " s");
    // Restarted (a new process, a new port), it joins and the grid grows back to four.
    alive.push_back(cluster.start(5.0));
    cluster.set_seed(joined(addresses(cluster, alive)));
    REQUIRE_MESSAGE(eventually([&] { return all_past(last = cluster.status(), 4, {}); }, 30s),
                    "restart after kill " << kill << "; last status: " << last.dump());
  }
  std::sort(went_on.begin(), went_on.end());
  MESSAGE("kill to rounds again: median " << went_on[went_on.size() / 2] << " s, worst " << went_on.back() << " s");
}

// More than half of a cluster lost at once: the survivors cannot elect a GridMaster (no strict majority of the
// confirmed members votes), and they keep walking their old members' addresses. The operator rebuilds it there: one
// dead node's address gets a node without --seed (a new cluster), another joins it. The survivors find the new
// cluster at that address and join it as new members, and their old lines must give way to its lines, whose layout
// versions start again from 1. Here the survivors had been through a failover, so their epoch was past the first:
// when every cluster's first epoch was 1, the new one refused them for good ("a member of epoch 2, newer than this
// cluster's 1"); survivors of a first epoch got in but sat out every round (their data plane held the new
// cluster's line versions as old ones).
TEST_CASE("after a majority is lost, a cluster rebuilt at a dead node's address takes the survivors in to average") {
  Cluster cluster;
  json last = start_running(cluster, 5);
  const auto epoch = last["epoch"].get<std::uint64_t>();
  const std::size_t gm = grid_master_index(cluster, last, 5);
  cluster.node(gm).signal(SIGKILL);
  const std::vector<std::size_t> four = all_but(5, {gm});
  cluster.set_seed(joined(addresses(cluster, four)));
  REQUIRE_MESSAGE(taken_over(cluster, last, epoch, 4, 10s), "last status: " << last.dump());
  const auto before = rounds_by_address(last);

  // Two of the four confirmed members killed at once: the two left are no strict majority.
  const std::vector<std::size_t> survivors{four[0], four[1]}, dead{four[2], four[3]};
  for (std::size_t i : dead) cluster.node(i).signal(SIGKILL);
  std::this_thread::sleep_for(3s);  // past the connection timeout: the survivors walk
  CHECK_FALSE(cluster.status(joined(addresses(cluster, survivors))).is_object());  // no cluster to show

  const std::string rebuilt = cluster.address(dead[0]);
  const std::size_t first = cluster.start_at(rebuilt, 20.0, true);
  cluster.set_seed(rebuilt);
  const std::size_t second = cluster.start_at(cluster.address(dead[1]), 20.0, false);
  // All four in the new cluster; then the survivors' rounds go on there (their counts are their own, kept).
  const bool listed = eventually([&] { return rounds_by_address(last = cluster.status(rebuilt)).size() == 4; }, 30s);
  REQUIRE_MESSAGE(listed, "last status: " << last.dump() << "\n" << outputs(cluster, 5) << "rebuilt:\n"
                                          << cluster.node(first).output() << "\njoined:\n"
                                          << cluster.node(second).output());
  const auto joined_at = rounds_by_address(last);
  const bool averaging = eventually(
      [&] {
        const auto rounds = rounds_by_address(last = cluster.status(rebuilt));
        if (rounds.size() != 4) return false;
        for (std::size_t i : survivors) {
          const std::string& a = cluster.address(i);
          if (!rounds.count(a) || !joined_at.count(a) || rounds.at(a) < joined_at.at(a) + 20) return false;
        }
        return true;
      },
      20s);
  CHECK_MESSAGE(averaging, "last status: " << last.dump() << "\nsurvivors:\n"
                                           << cluster.node(survivors[0]).output() << "\n"
                                           << cluster.node(survivors[1]).output());
  CHECK(last["epoch"].get<std::uint64_t>() > epoch);  // the new cluster's, after the old one's
}
