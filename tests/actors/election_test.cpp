// GridMaster failover, run deterministically: a successor's GridMaster elects from the last GridState of its
// node, and takes over only with a strict majority of the confirmed members; a GridMaster that would keep no
// majority steps down. The members are recorders, so every message the GridMaster sends is there to read.
#include <doctest/doctest.h>

#include <chrono>
#include <map>

#include "actors/grid_master.hpp"
#include "actors/messages.hpp"
#include "deterministic_system.hpp"
#include "join_challenge.hpp"
#include "test_support.hpp"

namespace gridtrain::testing {
namespace {

constexpr std::uint64_t kLostMaster = 1;  // the node whose GridMaster was lost
constexpr std::uint64_t kCandidate = 2;   // the lowest survivor: it stands

// Members 1..n of a cluster of epoch 3 whose GridMaster ran on node 1, each a recorder, and the GridMaster node 2
// spawns to stand as successor with the last GridState it held.
struct Election {
  explicit Election(std::uint64_t n, std::chrono::milliseconds silence_limit = std::chrono::milliseconds(0),
                    std::chrono::milliseconds lease = std::chrono::milliseconds(0))
      : config(cluster_config(2, 1.0)), store(make_store(64, 1.0f)) {
    grid::Layout layout = grid::Layout::fixed(2);
    actors::GridState last{3, 10, 0, {}, {}, {}, kLostMaster, {}};
    for (std::uint64_t id = 1; id <= n; ++id) {
      layout.add(id);
      members[id] = sim.recorder("node " + std::to_string(id));
      last.quorum_members.push_back(id);
    }
    last.layout = actors::layout_state(layout.snapshot());
    last.dims = static_cast<std::uint32_t>(layout.dims());
    for (std::uint64_t id = 1; id <= n; ++id)
      last.members.push_back({{id, address(id), {}, {}}, members[id], handles(id), handles(id), ""});
    actors::GridMasterSetup setup{config, {}, store->signature(), store->size(), address(kCandidate), kCandidate, last};
    setup.silence_limit = silence_limit;
    setup.lease = lease;
    setup.judge_local_silence = true;  // the recorders stand in for members in other processes
    gm = sim.spawn(actors::grid_master, std::move(setup));
    sim.run();
  }

  static std::string address(std::uint64_t id) { return "127.0.0.1:" + std::to_string(7000 + id); }
  std::vector<caf::actor> handles(std::uint64_t id) {
    return std::vector<caf::actor>(actors::kDimsOffered, members.at(id));
  }
  actors::Join join(std::uint64_t id, bool vote) {
    return actors::Join{id, address(id), "", store->signature(), store->size(), actors::protocol_version, 1, 0, "",
                        members.at(id), handles(id), handles(id), 3, vote, true};
  }
  void vote(std::uint64_t id, bool vote = true) { REQUIRE(join_with_challenge(sim, gm, gm, join(id, vote))); }
  void wait(std::chrono::milliseconds span) {
    sim.advance_time(span);
    sim.run();
  }
  const actors::GridMasterState& state() { return state_of<actors::GridMasterState>(gm); }
  std::vector<actors::Welcome> welcomes(std::uint64_t id) { return received<actors::Welcome>(members.at(id)); }

  DeterministicSystem sim;
  config::Config config;
  std::shared_ptr<learner::ParameterStore> store;
  std::map<std::uint64_t, caf::actor> members;
  caf::actor gm;
};

}  // namespace

TEST_CASE("a successor with the votes of a minority never takes over") {
  Election e(5);
  e.vote(kCandidate);
  e.vote(3);
  e.wait(std::chrono::seconds(10));  // far past the grace
  CHECK(e.state().electing);
  CHECK(e.state().members.empty());
  for (std::uint64_t id = 1; id <= 5; ++id) CHECK(e.welcomes(id).empty());
  // A new node that joins meanwhile waits for the outcome (it is not refused, and not let in).
  const caf::actor newcomer = e.sim.recorder("newcomer");
  auto fresh = e.join(3, false);
  fresh.node_id = 99;
  fresh.node = newcomer;
  fresh.epoch = 0;
  REQUIRE(join_with_challenge(e.sim, e.gm, e.gm, fresh));
  CHECK(messages(newcomer).empty());
  CHECK(e.state().waiting.size() == 1);
}

TEST_CASE("a strict majority takes over after the grace; the epoch rises and the voters keep their places") {
  Election e(5);
  e.vote(kCandidate);
  e.vote(3);
  e.vote(4);  // 3 of 5: a majority, but node 5 may still vote
  CHECK(e.state().electing);
  e.wait(std::chrono::milliseconds(500));
  REQUIRE_FALSE(e.state().electing);
  CHECK(e.state().epoch == 4);
  CHECK(e.state().layout_version == 11);
  CHECK(e.state().members.size() == 3);
  CHECK(e.state().quorum_members == std::set<std::uint64_t>{2, 3, 4});
  CHECK(e.state().layout.check_invariants() == "");
  for (std::uint64_t id : {2, 3, 4}) {
    const auto welcomes = e.welcomes(id);
    REQUIRE(welcomes.size() == 1);
    CHECK(welcomes[0].kept_place);
    CHECK(welcomes[0].epoch == 4);
    CHECK(welcomes[0].grid_master_node_id == kCandidate);
    // Its lines start again under the new epoch, and it holds the new state.
    const auto states = received<actors::GridState>(e.members.at(id));
    REQUIRE_FALSE(states.empty());
    CHECK(states.back().epoch == 4);
    CHECK(states.back().members.size() == 3);
  }
  std::size_t lines_started = 0;
  for (std::uint64_t id : {2, 3, 4})
    for (const auto& line : received<actors::StartLine>(e.members.at(id))) {
      CHECK(line.epoch == 4);
      ++lines_started;
    }
  CHECK(lines_started == e.state().layout.lines().size());
  CHECK(e.welcomes(5).empty());  // it did not vote: a new member if it asks later, no place kept
}

TEST_CASE("when every member but the lost GridMaster's node has voted, the successor takes over at once") {
  Election e(4);
  for (std::uint64_t id : {2, 3, 4}) e.vote(id);
  CHECK_FALSE(e.state().electing);  // no grace: nobody else could vote
  CHECK(e.state().members.size() == 3);
}

TEST_CASE("a confirmed member that leaves during the election no longer counts; another epoch's Leave changes nothing") {
  Election e(4);
  e.vote(kCandidate);
  e.vote(3);  // 2 of 4: no majority
  caf::anon_send(e.gm, actors::Leave{4, 2});  // not of the last state's epoch
  e.sim.run();
  e.wait(std::chrono::seconds(10));
  REQUIRE(e.state().electing);
  caf::anon_send(e.gm, actors::Leave{4, 3});  // node 4 left: 2 of the 3 left, and all but the lost GridMaster's
  e.sim.run();
  CHECK_FALSE(e.state().electing);
  CHECK(e.state().quorum_members == std::set<std::uint64_t>{2, 3});
  CHECK(e.welcomes(4).empty());
}

TEST_CASE("a voter that leaves during the election takes its vote with it") {
  Election e(5);
  e.vote(kCandidate);
  e.vote(3);
  e.vote(4);  // 3 of 5: the grace runs
  caf::anon_send(e.gm, actors::Leave{4, 3});  // 2 of the 4 left
  e.sim.run();
  e.wait(std::chrono::seconds(10));
  CHECK(e.state().electing);
  CHECK(e.state().members.empty());
}

TEST_CASE("a vote taken back does not count") {
  Election e(5);
  e.vote(kCandidate);
  e.vote(3);
  e.vote(3, false);  // node 3 now votes elsewhere
  e.vote(4);
  e.wait(std::chrono::seconds(10));
  CHECK(e.state().electing);
  CHECK(e.state().votes.size() == 2);
}

TEST_CASE("a voter whose connection is lost no longer counts") {
  Election e(5);
  e.vote(kCandidate);
  e.vote(3);
  caf::anon_send_exit(e.members.at(3), caf::exit_reason::kill);
  e.sim.run();
  e.vote(4);
  e.wait(std::chrono::seconds(10));
  CHECK(e.state().electing);
}

TEST_CASE("a GridMaster that would reach only half of its confirmed members steps down instead of going on") {
  Election e(3);
  e.vote(kCandidate);
  e.vote(3);  // every member but node 1: takeover with {2, 3}
  REQUIRE_FALSE(e.state().electing);
  REQUIRE(e.state().quorum_members == std::set<std::uint64_t>{2, 3});
  // Node 3's connection is lost: the GridMaster would keep 1 of 2. It cannot tell whether node 3 died or it is
  // the one cut off, so it ends, and leaves the decision to a majority.
  caf::anon_send_exit(e.members.at(3), caf::exit_reason::kill);
  e.sim.run();
  CHECK(ended(e.gm));
}

TEST_CASE("a GridMaster that keeps a strict majority removes the lost member and goes on") {
  Election e(4);
  for (std::uint64_t id : {2, 3, 4}) e.vote(id);
  REQUIRE(e.state().quorum_members.size() == 3);
  caf::anon_send_exit(e.members.at(4), caf::exit_reason::kill);
  e.sim.run();
  REQUIRE_FALSE(ended(e.gm));
  CHECK(e.state().members.size() == 2);
  // Not yet confirmed: the members still count node 4 until both acknowledge the new state.
  CHECK(e.state().quorum_members.size() == 3);
  for (std::uint64_t id : {2, 3}) {
    actors::NodeReport report;
    report.node_id = id;
    report.epoch = e.state().epoch;
    report.layout_version = e.state().layout_version;
    caf::anon_send(e.gm, report);
  }
  e.sim.run();
  CHECK(e.state().quorum_members == std::set<std::uint64_t>{2, 3});
}

}  // namespace gridtrain::testing

namespace gridtrain::testing {

TEST_CASE("a member that lost contact with a GridMaster that still has it is told it is in, not refused") {
  Election e(4);
  for (std::uint64_t id : {2, 3, 4}) e.vote(id);
  REQUIRE_FALSE(e.state().electing);
  take<actors::Welcome>(e.members.at(3));
  // Node 3 saw the GridMaster's connection drop (a stall on its side, say) and asks again, with its lines kept.
  auto again = e.join(3, true);
  again.epoch = e.state().epoch;
  REQUIRE(join_with_challenge(e.sim, e.gm, e.gm, again));
  const auto welcomes = take<actors::Welcome>(e.members.at(3));
  REQUIRE(welcomes.size() == 1);
  CHECK(welcomes[0].kept_place);
  CHECK(received<actors::Reject>(e.members.at(3)).empty());
  CHECK(e.state().members.size() == 3);
  // One that was taken out (it dropped its lines) is refused as before, until the GridMaster removes it.
  again.lines_kept = false;
  REQUIRE(join_with_challenge(e.sim, e.gm, e.gm, again));
  CHECK(take<actors::Reject>(e.members.at(3)).size() == 1);
}

TEST_CASE("a member whose reports stop is lost even when no connection closes: a death behind a relay") {
  using namespace std::chrono_literals;
  Election e(4, 2000ms);
  for (std::uint64_t id : {2, 3, 4}) e.vote(id);
  REQUIRE_FALSE(e.state().electing);
  auto report = [&](std::uint64_t id) {
    actors::NodeReport r;
    r.node_id = id;
    r.epoch = e.state().epoch;
    r.layout_version = e.state().layout_version;
    caf::anon_send(e.gm, r);
  };
  // Nodes 2 and 3 report every 250 ms; node 4 says nothing, and no down_msg comes for it.
  for (int tick = 1; tick <= 7; ++tick) {
    report(2);
    report(3);
    e.wait(250ms);
  }
  CHECK(e.state().members.size() == 3);  // 1.75 s of silence: not yet
  for (int tick = 1; tick <= 4; ++tick) {
    report(2);
    report(3);
    e.wait(250ms);
  }
  CHECK(e.state().members.size() == 2);
  CHECK_FALSE(e.state().members.count(4));
  CHECK(received<actors::Removed>(e.members.at(4)).size() == 1);
  CHECK_FALSE(ended(e.gm));
}

TEST_CASE("a GridMaster that was stalled itself does not count its members' silence against them") {
  using namespace std::chrono_literals;
  Election e(4, 2000ms);
  for (std::uint64_t id : {2, 3, 4}) e.vote(id);
  REQUIRE_FALSE(e.state().electing);
  e.wait(500ms);
  // The GridMaster's process is stopped for 8 s: when it runs again, no member has reported for 8 s, yet every
  // one may be fine. (Had they been lost, their connections would say so: CAF's timeout judges that stall.)
  e.wait(8000ms);
  CHECK(e.state().members.size() == 3);
  for (int tick = 1; tick <= 12; ++tick) {
    for (std::uint64_t id : {2, 3, 4}) {
      actors::NodeReport r;
      r.node_id = id;
      r.epoch = e.state().epoch;
      r.layout_version = e.state().layout_version;
      caf::anon_send(e.gm, r);
    }
    e.wait(250ms);
  }
  CHECK(e.state().members.size() == 3);
  CHECK(received<actors::Removed>(e.members.at(4)).empty());
}

}  // namespace gridtrain::testing

namespace gridtrain::testing {

namespace {

// Node `id`'s report, echoing `stamp`; the GridMaster's answer's stamp, which the node echoes next time.
std::int64_t report_echoing(Election& e, std::uint64_t id, std::int64_t stamp) {
  actors::NodeReport r;
  r.node_id = id;
  r.epoch = e.state().epoch;
  r.layout_version = e.state().layout_version;
  r.lease_stamp = stamp;
  const caf::message answer = e.sim.ask_message(e.gm, caf::make_message(r));
  REQUIRE(answer.match_elements<bool, std::int64_t>());
  CHECK(answer.get_as<bool>(0));
  return answer.get_as<std::int64_t>(1);
}

}  // namespace

TEST_CASE("a GridMaster leads while a majority echoes its answers, and steps down within its lease once not") {
  using namespace std::chrono_literals;
  Election e(5, 0ms, 2000ms);
  for (std::uint64_t id : {2, 3, 4, 5}) e.vote(id);
  REQUIRE_FALSE(e.state().electing);
  std::map<std::uint64_t, std::int64_t> stamps;
  // Every member reports every 250 ms, echoing the last answer it got: 5 s, and it leads throughout.
  for (int tick = 0; tick < 20; ++tick) {
    for (std::uint64_t id : {2, 3, 4, 5}) stamps[id] = report_echoing(e, id, stamps[id]);
    e.wait(250ms);
  }
  REQUIRE_FALSE(ended(e.gm));
  // A cut: only node 4 still reaches it. With its own node (2) that is 2 of the 4 confirmed members.
  auto passed = 0ms;
  while (!ended(e.gm) && passed < 5000ms) {
    stamps[4] = report_echoing(e, 4, stamps[4]);
    e.wait(250ms);
    passed += 250ms;
  }
  REQUIRE(ended(e.gm));
  // Not before the lease of the last answers echoed (given up to 250 ms before the cut), and within the lease and
  // an eighth: the members wait a quarter more (lease_wait) before they vote for another.
  CHECK(passed >= 1750ms);
  CHECK(passed <= 2500ms);
}

TEST_CASE("a GridMaster's lease is renewed by echoed answers only, not by reports alone or stamps it never gave") {
  using namespace std::chrono_literals;
  Election e(3, 0ms, 2000ms);
  for (std::uint64_t id : {2, 3}) e.vote(id);
  REQUIRE_FALSE(e.state().electing);
  // Node 3 reports on, but echoes no answer (a stamp of 0), then one from the future: neither renews the lease it
  // gave with its welcome, which runs out as if it had said nothing.
  std::int64_t answer = 0;
  auto passed = 0ms;
  while (!ended(e.gm) && passed < 5000ms) {
    answer = report_echoing(e, 3, passed < 1000ms ? 0 : answer + 3'600'000'000'000);
    e.wait(250ms);
    passed += 250ms;
  }
  REQUIRE(ended(e.gm));
  CHECK(passed <= 2500ms);
}

}  // namespace gridtrain::testing
