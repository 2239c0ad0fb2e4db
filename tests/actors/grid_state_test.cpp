// The GridState every node holds is the GridMaster's whole state: a successor could rebuild the same layout, with
// every member's handles, from any node's copy (the ground failover stands on).
#include <doctest/doctest.h>

#include "actors/grid_master.hpp"
#include "actors/messages.hpp"
#include "deterministic_cluster.hpp"
#include "test_support.hpp"
#include "tests/base/require_ok.hpp"

namespace gridtrain::testing {
namespace {

using namespace gridtrain::actors;

grid::Layout restored(const LayoutState& state) {
  auto snapshot = layout_snapshot(state);
  REQUIRE_OK(snapshot);
  auto layout = grid::Layout::restore(snapshot.value());
  REQUIRE_OK(layout);
  return std::move(layout).value();
}

// The members of the lines a change restarted hold the new state at once; the others fetch it with their next
// report, and the confirmation that follows goes to everyone (two report intervals are more than enough).
void report_twice(DeterministicCluster& cluster) {
  for (int i = 0; i < 2; ++i) {
    cluster.sim().advance_time(std::chrono::milliseconds(250));
    cluster.sim().run();
  }
}

}  // namespace

TEST_CASE("every node's last GridState rebuilds the GridMaster's layout and knows every member's handles") {
  DeterministicCluster cluster(cluster_config(2, 1.0));
  for (std::uint64_t id = 1; id <= 8; ++id) cluster.add(id, make_store(16, 1.0f), true);
  cluster.kill(3);  // a leave after the joins: the layout has moved on since some nodes joined
  cluster.sim().run();
  report_twice(cluster);
  const GridMasterState& master = cluster.grid_master();
  const grid::LayoutSnapshot want = master.layout.snapshot();
  for (std::uint64_t id : cluster.live()) {
    CAPTURE(id);
    const GridState* held = cluster.state(id).grid();
    REQUIRE(held != nullptr);
    CHECK(held->epoch == master.epoch);
    CHECK(held->layout_version == master.layout_version);
    CHECK(held->grid_master_node == 1);
    CHECK(restored(held->layout).snapshot() == want);
    REQUIRE(held->members.size() == master.members.size());
    for (const MemberState& m : held->members) {
      const auto& known = master.members.at(m.place.node_id);
      CHECK(m.node == known.node);
      CHECK(m.dimension_nodes == known.dimension_nodes);
      CHECK(m.line_masters == known.line_masters);
    }
  }
}

TEST_CASE("a change tells the state at once only to its lines; the others fetch it once, with a report answer") {
  DeterministicCluster cluster(cluster_config(2, 1.0));
  for (std::uint64_t id = 1; id <= 17; ++id) cluster.add(id, make_store(16, 1.0f), true);
  report_twice(cluster);  // everyone holds the state of the 17 members...
  report_twice(cluster);  // ...and the state that confirms them
  const GridMasterState& master = cluster.grid_master();
  REQUIRE(master.quorum_members.size() == 17);
  REQUIRE(master.layout.shape() == std::vector<int>{5, 5});

  cluster.add(18, make_store(16, 1.0f), true);  // a free cell of the 5x5 grid: two lines change, not all
  cluster.sim().run();
  const std::uint64_t version = master.layout_version;
  std::size_t told = 0, behind = 0;
  for (std::uint64_t id : cluster.live()) {
    const GridState* held = cluster.state(id).grid();
    REQUIRE(held != nullptr);
    (held->layout_version == version ? told : behind) += 1;
  }
  CHECK(told >= 3);     // the joiner and its line peers
  CHECK(behind >= 9);   // not broadcast
  CHECK(master.membership.joins == 18);

  // Those behind fetch it with their next report; once all hold it, node 18 is confirmed, and everyone is sent
  // the state that says so: one state per member and change to the state, however many reports they send.
  const std::uint64_t sent = master.membership.states_sent;
  report_twice(cluster);
  report_twice(cluster);
  CHECK(master.quorum_members.size() == 18);
  for (std::uint64_t id : cluster.live()) {
    CHECK(cluster.state(id).grid()->layout_version == version);
    CHECK(cluster.state(id).grid()->quorum_members.size() == 18);
  }
  CHECK(master.membership.states_sent - sent == behind + 18);
  report_twice(cluster);
  CHECK(master.membership.states_sent - sent == behind + 18);
}

TEST_CASE("a layout state whose sizes do not fit each other is refused before anything is built from it") {
  const LayoutState good{2, 0, 2, 3, {7, 9}, {0, 0, 1, 0}, {0}, {0}, {7}};
  REQUIRE_OK(layout_snapshot(good));
  struct Bad {
    const char* what;
    LayoutState state;
    const char* fragment;
  };
  std::vector<Bad> cases;
  auto with = [&](const char* what, const char* fragment, auto change) {
    LayoutState s = good;
    change(s);
    cases.push_back({what, s, fragment});
  };
  with("dims 0", "dims 0 outside", [](LayoutState& s) { s.dims = 0; });
  with("dims 7", "dims 7 outside", [](LayoutState& s) { s.dims = 7; });
  with("a coordinate short", "3 coordinates for 2 nodes", [](LayoutState& s) { s.coords.pop_back(); });
  with("a master without a node", "different lengths", [](LayoutState& s) { s.master_nodes.clear(); });
  with("a master in dimension 2 of 2", "a master of no dimension", [](LayoutState& s) { s.master_dims = {2}; });
  for (const Bad& c : cases) {
    CAPTURE(c.what);
    auto r = layout_snapshot(c.state);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find(c.fragment) != std::string::npos);
  }
  // Sizes that fit but a layout that is not one: restore says so.
  LayoutState shared = good;
  shared.coords = {0, 0, 0, 0};
  auto snapshot = layout_snapshot(shared);
  REQUIRE_OK(snapshot);
  CHECK_FALSE(grid::Layout::restore(snapshot.value()).ok());
}

}  // namespace gridtrain::testing
