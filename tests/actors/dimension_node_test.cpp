// A DimensionNode driven directly: the test plays its LineMaster and its line peer.
#include <doctest/doctest.h>

#include <chrono>

#include "actors/dimension_node.hpp"
#include "actors/messages.hpp"
#include "actors/system_config.hpp"
#include "cluster_harness.hpp"

namespace gridtrain::testing {
namespace {

constexpr auto kWait = std::chrono::seconds(30);

struct DimensionNodeFixture {
  DimensionNodeFixture() : system_config(cluster_config(2, 1.0)), system(system_config), peer(system), master(system) {
    store = std::make_shared<learner::ParameterStore>(std::vector<learner::TensorSpec>{{"a", {8}}});
    store->assign(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
    node = system.spawn(actors::dimension_node, actors::DimensionNodeSetup{0, 1, store});
  }
  ~DimensionNodeFixture() { caf::anon_send_exit(node, caf::exit_reason::kill); }

  actors::StartLine line(std::uint64_t version, std::uint64_t floats = 8) {
    actors::StartLine l{1, version, 0, 0, {{1, node, ""}, {2, caf::actor_cast<caf::actor>(peer), ""}}, {}, caf::actor_cast<caf::actor>(master)};
    l.settings.model_floats = floats;
    l.settings.round.max_chunk_floats = 4;
    l.settings.rounds_in_flight = 2;
    return l;
  }

  actors::DimensionStats stats() {
    actors::DimensionStats out;
    peer->request(node, kWait, actors::stats_atom::value)
        .receive([&](actors::DimensionStats& s) { out = s; }, [](caf::error&) { FAIL("no stats"); });
    return out;
  }

  actors::SystemConfig system_config;
  caf::actor_system system;
  caf::scoped_actor peer, master;
  std::shared_ptr<learner::ParameterStore> store;
  caf::actor node;
};

}  // namespace

TEST_CASE("a round message of a line version not yet announced waits for its StartLine") {
  DimensionNodeFixture f;
  // A fast peer's first chunk overtakes our StartLine.
  caf::anon_send(f.node, actors::ScatterChunk{{1, 2, 0, 0, 1}, 1, 0, {{10, 20, 30, 40}}});
  caf::anon_send(f.node, f.line(2));
  // Round 1 goes to worker slot 1 % 2, which starts the round on that chunk: it scatters our block 1 to the peer.
  f.peer->receive(
      [&](actors::ScatterChunk& c) {
        CHECK(c.key == allreduce::RoundKey{1, 2, 0, 0, 1});
        CHECK(c.from == 0);
        CHECK(c.offset == 4);
        CHECK(c.data.values == std::vector<float>{5, 6, 7, 8});
      },
      caf::after(kWait) >> [] { FAIL("the early chunk was not delivered"); });
  // Our block got both contributions already: its mean goes to the peer.
  f.peer->receive([&](actors::ReducedChunk& r) { CHECK(r.data.values == std::vector<float>{5.5f, 11, 16.5f, 22}); },
                  caf::after(kWait) >> [] { FAIL("no reduced chunk"); });
  const auto s = f.stats();
  CHECK(s.layout_version == 2);
  CHECK(s.peers == 2);
}

TEST_CASE("a round message of an older line version is dropped and counted; another dimension's is malformed") {
  DimensionNodeFixture f;
  caf::anon_send(f.node, f.line(2));
  caf::anon_send(f.node, actors::ScatterChunk{{1, 1, 0, 0, 0}, 1, 0, {{10, 20, 30, 40}}});
  caf::anon_send(f.node, actors::StartRound{{1, 1, 0, 0, 0}});
  caf::anon_send(f.node, actors::ScatterChunk{{1, 2, 4, 0, 0}, 1, 0, {{10, 20, 30, 40}}});
  caf::anon_send(f.node, actors::ReducedChunk{{1, 2, 0, 3, 0}, 1, 4, 2, {{10, 20, 30, 40}}});  // same version, other line
  CHECK(eventually([&] {
    const auto s = f.stats();
    return s.rounds.stale_dropped == 2 && s.rounds.malformed == 2;
  }));
}

TEST_CASE("a StartLine that does not fit the node is refused") {
  DimensionNodeFixture f;
  caf::anon_send(f.node, f.line(2, 9));  // a model of another size
  auto other = f.line(3);
  other.peers[0].node_id = 7;  // a line without us
  caf::anon_send(f.node, other);
  auto no_master = f.line(4);
  no_master.line_master = nullptr;
  caf::anon_send(f.node, no_master);
  CHECK(eventually([&] { return f.stats().rounds.malformed == 3; }));
  CHECK(f.stats().layout_version == 0);
}

}  // namespace gridtrain::testing
