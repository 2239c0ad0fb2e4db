// A node that loses the cluster while it is alive rejoins by itself, run deterministically.
#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "actors/grid_master.hpp"
#include "actors/line_master.hpp"
#include "actors/node.hpp"
#include "deterministic_cluster.hpp"
#include "test_support.hpp"

namespace gridtrain::testing {
namespace {

// Three paced nodes in 1-D (one line of all), never allowed a round: only a warm start moves a store.
struct RejoinFixture {
  RejoinFixture() : cluster(cluster_config(1, 1.0)) {
    for (std::uint64_t id = 1; id <= 3; ++id) cluster.add(id, make_store(20, 10.0f * id), true);
    cluster.sim().run();
  }

  // Node 2 taken out of the grid while it is alive, as the GridMaster does when its failure detector fires on a
  // node that is only stalled: here on a Leave sent in its name.
  void remove_node_2() {
    caf::anon_send(cluster.grid_master_actor(), actors::Leave{2, cluster.state(1).epoch});
  }

  DeterministicCluster cluster;
};

// A GridMaster as a member sees it, played by the test: it welcomes the node that joins through it, then answers its
// reports with `answer` (or, unset, not at all: a GridMaster dead behind a relay, whose death CAF never reports).
struct GridMasterStandIn {
  std::optional<bool> answer;
  std::uint64_t reports = 0;
};

caf::behavior grid_master_stand_in(caf::stateful_actor<GridMasterStandIn>* self, std::optional<bool> answer) {
  self->state.answer = answer;
  return {
      [self](const actors::Join& join) {
        self->send(join.node, actors::Welcome{join.node_id, 1, "", caf::actor_cast<caf::actor>(self),
                                              "local:gm", 99, 1, false});
      },
      [self](const actors::NodeReport&) -> caf::result<bool, std::int64_t> {
        ++self->state.reports;
        if (self->state.answer) return {*self->state.answer, std::int64_t{1}};
        return self->make_response_promise<bool, std::int64_t>();  // never delivered
      },
      [self](actors::step_down_atom) { self->quit(caf::exit_reason::normal); },
  };
}

// Node `id` (1 unless said) joins through the stand-in, then 250 ms report ticks pass until `until` holds or `limit` has passed.
struct StandInFixture {
  explicit StandInFixture(std::optional<bool> answer, std::uint64_t id = 1) : cluster(cluster_config(1, 1.0)) {
    gm = cluster.sim().spawn(grid_master_stand_in, answer);
    auto setup = cluster.setup(id, make_store(20, 1.0f));
    setup.seed_node = gm;
    setup.lease_for_local_grid_master = true;  // the stand-in plays a GridMaster in another process
    cluster.start(std::move(setup));
    cluster.sim().run();
  }
  // Returns the time that passed.
  std::chrono::milliseconds tick_until(const std::function<bool()>& until, std::chrono::milliseconds limit) {
    std::chrono::milliseconds passed{0};
    while (!until() && passed < limit) {
      cluster.sim().advance_time(std::chrono::milliseconds(250));
      cluster.sim().run();
      passed += std::chrono::milliseconds(250);
    }
    return passed;
  }
  DeterministicCluster cluster;
  caf::actor gm;
};

// A member as another member sees it, played by the test: it records the Joins and GridStates it is sent.
struct MemberStandIn {
  std::uint64_t id = 0;
  std::uint64_t joins = 0;
  std::uint64_t votes = 0;
  std::uint64_t grid_states = 0;
  std::uint64_t largest_state = 0;  // members in the largest GridState it was sent
  // In the last GridState it was sent: the members whose node handle came with it, by id.
  std::vector<std::uint64_t> with_handles;
};

// (Spawned with an argument: CAF 0.17 spawns a function actor with none through a null pointer, which UBSan reports.)
caf::behavior member_stand_in(caf::stateful_actor<MemberStandIn>* self, std::uint64_t id) {
  self->state.id = id;
  return {
      [self](const actors::Join& join) {
        ++self->state.joins;
        self->state.votes += join.vote;
      },
      [self](const actors::GridState& grid) {
        ++self->state.grid_states;
        self->state.largest_state = std::max<std::uint64_t>(self->state.largest_state, grid.members.size());
        self->state.with_handles.clear();
        for (const auto& m : grid.members)
          if (m.node) self->state.with_handles.push_back(m.place.node_id);
      },
      [](const actors::Reject&) {},
  };
}

actors::MemberState member_at(std::uint64_t id, caf::actor node) {
  actors::MemberState m;
  m.place.node_id = id;
  m.place.address = fmt::format("local:{:016x}", id);
  m.node = std::move(node);
  return m;
}

}  // namespace

TEST_CASE("walkers share what they know: a rejoining node answers a Join with its GridState, and walks newer members") {
  // On a 5 Mbit/s link two nodes stood at once; the lower one, known only to a third, held the third's vote and
  // waited for the first's, which waited for the third's, and no cluster formed again (docs/design.md, "Walkers
  // share what they know"). Node 5 follows a GridMaster that never answers; its GridState names member 2.
  StandInFixture f(std::nullopt, 5);
  auto& node = f.cluster.state(5);
  const caf::actor low = f.cluster.sim().spawn(member_stand_in, std::uint64_t{2});
  actors::GridState grid;
  grid.epoch = 1;
  grid.layout_version = 2;
  grid.dims = 1;
  const caf::actor asker = f.cluster.sim().spawn(member_stand_in, std::uint64_t{7});
  grid.members = {member_at(2, low), member_at(5, f.cluster.node(5)), member_at(7, asker)};
  grid.quorum_members = {2, 5, 7};
  caf::anon_send(f.cluster.node(5), grid);
  f.cluster.sim().run();
  f.tick_until([&] { return node.phase != actors::NodePhase::member; }, std::chrono::seconds(10));
  REQUIRE(node.phase == actors::NodePhase::rejoining);
  f.tick_until([&] { return state_of<MemberStandIn>(low).votes > 0; }, std::chrono::seconds(2));
  CHECK(state_of<MemberStandIn>(low).votes > 0);  // the lowest member that answers gets its vote
  CHECK_FALSE(node.candidate);

  // Another member that lost the GridMaster asks it: it hears that this node is no member, and gets its GridState.
  actors::Join join;
  join.node_id = 7;
  join.node = asker;
  caf::anon_send(f.cluster.node(5), join);
  f.cluster.sim().run();
  CHECK(state_of<MemberStandIn>(asker).grid_states == 1);
  CHECK(state_of<MemberStandIn>(asker).largest_state == 3);
  // With the handles of the two of them only: a third node's, perhaps the dead one's, would make CAF route to that
  // node through the sender, and two survivors routing it through each other sent messages around for good.
  CHECK(state_of<MemberStandIn>(asker).with_handles == std::vector<std::uint64_t>{5, 7});
  // A node that is no member of it (a new joiner using this node as its seed) gets none.
  const caf::actor stranger = f.cluster.sim().spawn(member_stand_in, std::uint64_t{9});
  join.node_id = 9;
  join.node = stranger;
  caf::anon_send(f.cluster.node(5), join);
  f.cluster.sim().run();
  CHECK(state_of<MemberStandIn>(stranger).grid_states == 0);

  // A newer GridState of the same epoch names member 3, which it never heard of: its next walk asks it too.
  const caf::actor newer = f.cluster.sim().spawn(member_stand_in, std::uint64_t{3});
  grid.layout_version = 3;
  grid.members = {member_at(2, low), member_at(3, newer), member_at(5, f.cluster.node(5)), member_at(7, asker)};
  caf::anon_send(f.cluster.node(5), grid);
  f.cluster.sim().run();
  f.tick_until([&] { return state_of<MemberStandIn>(newer).joins > 0; }, std::chrono::seconds(3));
  CHECK(state_of<MemberStandIn>(newer).joins > 0);
}

namespace {

// Node 5 follows the stand-in, which answers its reports; its GridState names member 2, below it, whose Joins the
// test counts. Then it loses the GridMaster as `end` says, and ticks pass until member 2 has its vote (at most 5 s):
// the time that took.
std::chrono::milliseconds time_to_vote(const std::function<void(const caf::actor& gm)>& end) {
  StandInFixture f(true, 5);
  const caf::actor low = f.cluster.sim().spawn(member_stand_in, std::uint64_t{2});
  actors::GridState grid;
  grid.epoch = 1;
  grid.layout_version = 2;
  grid.dims = 1;
  grid.members = {member_at(2, low), member_at(5, f.cluster.node(5))};
  grid.quorum_members = {2, 5};
  caf::anon_send(f.cluster.node(5), grid);
  f.cluster.sim().run();
  f.tick_until([] { return false; }, std::chrono::seconds(1));  // reports answered: its last answer is this fresh
  end(f.gm);
  f.cluster.sim().run();
  REQUIRE(f.cluster.state(5).phase == actors::NodePhase::rejoining);
  const auto passed =
      f.tick_until([&] { return state_of<MemberStandIn>(low).votes > 0; }, std::chrono::milliseconds(5000));
  CHECK(state_of<MemberStandIn>(low).joins > 0);  // asked all along, with plain Joins until it could vote
  return passed;
}

}  // namespace

TEST_CASE("a member that lost its GridMaster's connection votes only once the lease it promised has run out") {
  // The GridMaster may be alive on the other side of a cut, and leading until its lease runs out (GridMasterSetup::
  // lease: 2 s at the default connection timeout); the member waits that, and a quarter, after its last answer.
  const auto passed = time_to_vote([](const caf::actor& gm) {
    caf::anon_send_exit(gm, caf::exit_reason::remote_link_unreachable);
  });
  CHECK(passed >= std::chrono::milliseconds(2250));
  CHECK(passed <= std::chrono::milliseconds(3000));
}

TEST_CASE("a member whose GridMaster stepped down votes at once: no lease of it holds") {
  const auto passed = time_to_vote([](const caf::actor& gm) { caf::anon_send(gm, actors::step_down_atom::value); });
  CHECK(passed <= std::chrono::milliseconds(500));
}

TEST_CASE("a member whose GridMaster answers no report for the silence limit counts it lost, though no down_msg came") {
  // In a 30-minute chaos run a member followed a GridMaster that had died behind a relay for minutes, while the
  // others waited for its vote. The limit is four connection timeouts: 4 s at the default 1000 ms.
  StandInFixture f(std::nullopt);
  auto& node = f.cluster.state(1);
  REQUIRE(node.phase == actors::NodePhase::member);
  const auto passed = f.tick_until([&] { return node.phase != actors::NodePhase::member; }, std::chrono::seconds(10));
  CHECK(node.phase == actors::NodePhase::rejoining);
  CHECK(node.lines_kept);  // as after a down_msg: its lines go on while it looks for the cluster
  CHECK(passed > std::chrono::milliseconds(4000));
  CHECK(passed <= std::chrono::milliseconds(4500));
  CHECK(state_of<GridMasterStandIn>(f.gm).reports >= 15);
}

TEST_CASE("a member whose GridMaster answers its reports stays, however long it runs") {
  StandInFixture f(true);
  auto& node = f.cluster.state(1);
  f.tick_until([] { return false; }, std::chrono::seconds(10));
  CHECK(node.phase == actors::NodePhase::member);
  CHECK(state_of<GridMasterStandIn>(f.gm).reports >= 35);
}

TEST_CASE("a member stopped longer than the silence limit does not count its own silence against its GridMaster") {
  StandInFixture f(true);
  auto& node = f.cluster.state(1);
  f.tick_until([] { return false; }, std::chrono::seconds(1));
  // Its process is stopped for 8 s: when it runs again, its last answer is 8 s old, but the gap was its own.
  f.cluster.sim().advance_time(std::chrono::seconds(8));
  f.cluster.sim().run();
  f.tick_until([] { return false; }, std::chrono::seconds(1));
  CHECK(node.phase == actors::NodePhase::member);
}

TEST_CASE("a member told by its GridMaster that it is no member (its Removed was lost) drops its lines and rejoins") {
  StandInFixture f(false);
  auto& node = f.cluster.state(1);
  f.tick_until([&] { return node.phase != actors::NodePhase::member; }, std::chrono::seconds(1));
  CHECK(node.phase != actors::NodePhase::member);
  CHECK_FALSE(node.lines_kept);
}

TEST_CASE("a node taken out of the grid while alive drops its lines, rejoins and copies a line peer's model") {
  RejoinFixture f;
  REQUIRE(f.cluster.members() == std::vector<std::uint64_t>{1, 2, 3});
  const auto& node2 = f.cluster.state(2);
  const std::uint64_t version = f.cluster.grid_master().layout_version;
  f.remove_node_2();
  f.cluster.sim().run();
  // Removed, it lost the cluster; its first attempt, through the GridMaster's node, let it back in at once.
  CHECK(node2.phase == actors::NodePhase::member);
  CHECK(node2.rejoins == 1);
  CHECK(f.cluster.members() == std::vector<std::uint64_t>{1, 2, 3});
  CHECK(f.cluster.grid_master().layout_version == version + 2);  // out, then in again
  // Warm start: it holds a line peer's model now (nobody ran a round, so the peers still hold their own).
  CHECK(node2.warm_starts == 1);
  const auto copied = read(*f.cluster.store(2));
  CHECK((copied == read(*f.cluster.store(1)) || copied == read(*f.cluster.store(3))));
  CHECK(f.cluster.outcome(2).result == actors::JoinResult::welcomed);  // its first join's outcome stands
}

TEST_CASE("a rejoining node that the GridMaster still counts as a member keeps asking until it is let back in") {
  RejoinFixture f;
  auto& node2 = f.cluster.state(2);
  // It lost contact, as far as it knows; the GridMaster has not noticed (its failure detector is slower).
  caf::anon_send(f.cluster.node(2), actors::Removed{2, node2.epoch, 0});
  f.cluster.sim().run();
  CHECK(node2.phase == actors::NodePhase::rejoining);  // "already in the cluster": not let in, and not ended
  CHECK_FALSE(ended(f.cluster.node(2)));
  for (const auto& master : node2.line_masters) CHECK_FALSE(state_of<actors::LineMasterState>(master).line);
  // Then the GridMaster takes it out; the next attempt, one rejoin_interval later, gets it back in.
  f.remove_node_2();
  f.cluster.sim().run();
  CHECK(node2.phase == actors::NodePhase::rejoining);
  f.cluster.sim().advance_time(std::chrono::milliseconds(1000));
  f.cluster.sim().run();
  CHECK(node2.phase == actors::NodePhase::member);
  CHECK(node2.rejoins == 1);
  CHECK(f.cluster.members() == std::vector<std::uint64_t>{1, 2, 3});
}

TEST_CASE("members that leave while the others elect a GridMaster are not waited for: the last one left leads alone") {
  // The end of a run: every node finishes and leaves, the GridMaster's among the first. Node 3 leaves while it and
  // node 2 are still rejoining; node 2 must not wait for node 3's vote for good (its staleness bound held its
  // training 10 s at a time), but lead a cluster of one.
  RejoinFixture f;
  auto& node2 = f.cluster.state(2);
  auto& node3 = f.cluster.state(3);
  caf::anon_send(f.cluster.node(1), actors::stop_atom::value);
  REQUIRE(f.cluster.sim().run_until([&] { return node3.phase == actors::NodePhase::rejoining; },
                                    DeterministicSystem::kMaxEvents));
  CHECK(node2.phase != actors::NodePhase::member);  // no successor leads yet
  f.cluster.stop(3);
  f.cluster.sim().run();
  for (int i = 0; i < 10 && node2.phase != actors::NodePhase::member; ++i) {
    f.cluster.sim().advance_time(std::chrono::milliseconds(500));
    f.cluster.sim().run();
  }
  CHECK(node2.phase == actors::NodePhase::member);
  REQUIRE(node2.grid());
  CHECK(node2.grid()->members.size() == 1);
  CHECK(node2.grid()->quorum_members == std::vector<std::uint64_t>{2});
}

TEST_CASE("a node removed while alive stops driving the lines it mastered") {
  RejoinFixture f;
  // Node 1 bootstrapped: it masters the one line. Take it out: its LineMaster must stop driving that line.
  const caf::actor master1 = f.cluster.state(1).line_masters.at(0);
  REQUIRE(state_of<actors::LineMasterState>(master1).line);
  caf::anon_send(f.cluster.grid_master_actor(), actors::Leave{1, f.cluster.state(1).epoch});
  f.cluster.sim().run();
  // It rejoined at once (its GridMaster is its own), but the line it mastered is another node's now.
  CHECK(f.cluster.members() == std::vector<std::uint64_t>{1, 2, 3});
  CHECK_FALSE(state_of<actors::LineMasterState>(master1).line);
}

}  // namespace gridtrain::testing
