// A node that loses the cluster while it is alive rejoins by itself, run deterministically.
#include <doctest/doctest.h>

#include <chrono>

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

}  // namespace

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
