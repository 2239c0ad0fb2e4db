// A DimensionNode driven directly, message by message, over the deterministic system's data plane: a recorder
// plays its LineMaster, and its line peer is a bare data plane endpoint the test drives (whose round events go to
// another recorder).
#include <doctest/doctest.h>

#include "actors/dimension_node.hpp"
#include "actors/messages.hpp"
#include "deterministic_system.hpp"

namespace gridtrain::testing {
namespace {

constexpr const char* kToken = "dimension node test token";

std::shared_ptr<learner::ParameterStore> store_of(std::vector<float> values) {
  auto store = std::make_shared<learner::ParameterStore>(std::vector<learner::TensorSpec>{{"a", {8}}});
  store->assign(values);
  return store;
}

std::vector<float> values_of(const learner::ParameterStore& store) {
  std::vector<float> out(store.size());
  store.fetch(out);
  return out;
}

struct DimensionNodeFixture {
  DimensionNodeFixture()
      : master(sim.recorder("line master")),
        peer_node(sim.recorder("peer's DimensionNode")),
        store(store_of({1, 2, 3, 4, 5, 6, 7, 8})),
        peer_store(store_of({11, 12, 13, 14, 15, 16, 17, 18})) {
    auto routes = std::make_shared<std::vector<caf::actor>>();
    data = sim.data_plane()->add_endpoint(actors::endpoint_setup(1, store, kToken, routes));
    node = sim.spawn(actors::dimension_node, actors::DimensionNodeSetup{0, 1, store, data, {}});
    routes->push_back(node);
    peer = sim.data_plane()->add_endpoint(
        actors::endpoint_setup(2, peer_store, kToken, std::make_shared<std::vector<caf::actor>>(1, peer_node)));
  }

  actors::StartLine line(std::uint64_t version, std::uint64_t floats = 8) {
    actors::StartLine l{1, version, 0, 0, {{1, node, "", ""}, {2, peer_node, "", ""}}, {}, master};
    l.settings.model_floats = floats;
    l.settings.round.max_chunk_floats = 4;
    l.settings.round.reduce_threshold = l.settings.round.complete_threshold = 1.0;
    l.settings.round.quorum = allreduce::QuorumMode::fraction;
    l.settings.round.elastic_rate = 1.0;  // a round leaves both models at their mean
    l.settings.rounds_in_flight = 2;
    return l;
  }

  // The same line, as the peer's data plane is told of it.
  void peer_joins(const actors::StartLine& l) {
    dataplane::LineSpec spec{.epoch = l.epoch,
                             .layout_version = l.layout_version,
                             .dim = l.dim,
                             .line = l.line,
                             .peers = {1, 2},
                             .self_index = 1,
                             .round = l.settings.round,
                             .rounds_in_flight = l.settings.rounds_in_flight};
    peer->start_line(spec, {"", ""});
  }

  actors::DimensionStats stats() { return sim.ask<actors::DimensionStats>(node, actors::stats_atom::value); }

  DeterministicSystem sim;
  caf::actor master, peer_node;
  std::shared_ptr<learner::ParameterStore> store, peer_store;
  std::shared_ptr<dataplane::Endpoint> data, peer;
  caf::actor node;
};

const std::vector<float> kMean{6, 7, 8, 9, 10, 11, 12, 13};

}  // namespace

TEST_CASE("a round runs over the data plane, and its end goes to the LineMaster") {
  DimensionNodeFixture f;
  const auto l = f.line(2);
  caf::anon_send(f.node, l);
  f.peer_joins(l);
  caf::anon_send(f.node, actors::StartRound{{1, 2, 0, 0, 0}});
  f.peer->start_round({1, 2, 0, 0, 0});
  f.sim.run();
  const auto done = take<actors::RoundDone>(f.master);
  CHECK_MESSAGE(messages(f.master).empty(), describe(f.master));
  REQUIRE(done.size() == 1);
  CHECK(done[0].key == allreduce::RoundKey{1, 2, 0, 0, 0});
  CHECK(done[0].from == 0);
  CHECK(done[0].chunks_missing == 0);
  CHECK(values_of(*f.store) == kMean);
  CHECK(values_of(*f.peer_store) == kMean);
  const auto stats = f.stats();
  CHECK(stats.layout_version == 2);
  CHECK(stats.peers == 2);
  CHECK(stats.rounds.rounds_done == 1);
  // Our block 1 to the peer, and the mean of our block 0 back: 8 floats each way.
  CHECK(stats.rounds.bytes_sent == 32);
  CHECK(stats.rounds.bytes_received == 32);
  CHECK(stats.rounds.quorum_shortfalls == 0);
}

TEST_CASE("a peer's frame starts a round before its StartRound comes, and the round still ends once") {
  DimensionNodeFixture f;
  const auto l = f.line(2);
  caf::anon_send(f.node, l);
  f.peer_joins(l);
  f.sim.run();
  f.peer->start_round({1, 2, 0, 0, 0});
  f.sim.run();
  CHECK(received<actors::RoundDone>(f.master).size() == 1);
  CHECK(values_of(*f.store) == kMean);
  // The LineMaster's StartRound, late: the round is done, and it starts nothing twice.
  caf::anon_send(f.node, actors::StartRound{{1, 2, 0, 0, 0}});
  f.sim.run();
  CHECK(received<actors::RoundDone>(f.master).size() == 1);
  CHECK(f.stats().rounds.rounds_done == 1);
}

TEST_CASE("in timeout quorum mode, a silent peer costs the round its deadline, not forever") {
  DimensionNodeFixture f;
  auto l = f.line(2);
  l.settings.round.quorum = allreduce::QuorumMode::timeout;
  l.settings.round.quorum_timeout_ms = 200;
  l.settings.round.reduce_threshold = l.settings.round.complete_threshold = 0.5;
  caf::anon_send(f.node, l);
  // The peer never got the line (it stalled before): it drops our chunks and sends none. (A peer with the line
  // would start the round on our first chunk, as in the case above.)
  caf::anon_send(f.node, actors::StartRound{{1, 2, 0, 0, 0}});
  f.sim.run();
  CHECK_MESSAGE(messages(f.master).empty(), describe(f.master));  // it waits for everyone until the deadline
  f.sim.advance_time(std::chrono::milliseconds(200));
  f.sim.run();
  const auto done = received<actors::RoundDone>(f.master);
  REQUIRE(done.size() == 1);
  CHECK(done[0].chunks_missing == 1);  // the peer's block never came; ours is reduced from us alone
  CHECK(f.stats().rounds.quorum_shortfalls == 1);
}

TEST_CASE("round starts of another line version, line or dimension are dropped and counted") {
  DimensionNodeFixture f;
  caf::anon_send(f.node, f.line(3));
  caf::anon_send(f.node, actors::StartRound{{1, 2, 0, 0, 0}});  // an older layout version
  caf::anon_send(f.node, actors::StartRound{{1, 4, 0, 0, 0}});  // a newer one, not announced to us
  caf::anon_send(f.node, actors::StartRound{{1, 3, 1, 0, 0}});  // another dimension
  caf::anon_send(f.node, actors::StartRound{{1, 3, 0, 5, 0}});  // another line
  caf::anon_send(f.node, f.line(2));                            // a StartLine older than ours
  f.sim.run();
  const auto stats = f.stats();
  CHECK(stats.rounds.stale_dropped == 5);
  CHECK(stats.layout_version == 3);
  CHECK(messages(f.master).empty());
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
  auto no_handle = f.line(5);
  no_handle.peers[1].dimension_node = nullptr;
  caf::anon_send(f.node, no_handle);
  f.sim.run();
  const auto stats = f.stats();
  CHECK(stats.rounds == actors::RoundStats{.malformed = 4});
  CHECK(stats.layout_version == 0);
  // Nor did the data plane get a line: the peer's round finds nobody to run it with.
  f.peer_joins(f.line(2));
  f.peer->start_round({1, 2, 0, 0, 0});
  f.sim.run();
  CHECK(messages(f.master).empty());
  CHECK(values_of(*f.store) == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
}

TEST_CASE("a node that lost the cluster runs no round of its old line, and runs those of its next one") {
  DimensionNodeFixture f;
  const auto l = f.line(2);
  caf::anon_send(f.node, l);
  f.peer_joins(l);
  f.sim.run();
  caf::anon_send(f.node, actors::lost_atom::value);
  caf::anon_send(f.node, actors::StartRound{{1, 2, 0, 0, 0}});
  f.peer->start_round({1, 2, 0, 0, 0});
  f.sim.run();
  CHECK(messages(f.master).empty());
  CHECK(values_of(*f.store) == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(f.stats().rounds.stale_dropped >= 1);
  // Welcomed back: a newer version of the line.
  const auto next = f.line(3);
  caf::anon_send(f.node, next);
  f.peer_joins(next);
  caf::anon_send(f.node, actors::StartRound{{1, 3, 0, 0, 0}});
  f.peer->start_round({1, 3, 0, 0, 0});
  f.sim.run();
  CHECK(received<actors::RoundDone>(f.master).size() == 1);
  CHECK(values_of(*f.store)[0] != 1);  // averaged with the peer's model, as it was when its round 0 of 3 began
}

}  // namespace gridtrain::testing
