// A DimensionNode driven directly, message by message: recorders play its LineMaster and its line peer.
#include <doctest/doctest.h>

#include "actors/dimension_node.hpp"
#include "actors/messages.hpp"
#include "actors/worker.hpp"
#include "deterministic_system.hpp"

namespace gridtrain::testing {
namespace {

struct DimensionNodeFixture {
  DimensionNodeFixture() : peer(sim.recorder("peer")), master(sim.recorder("line master")) {
    store = std::make_shared<learner::ParameterStore>(std::vector<learner::TensorSpec>{{"a", {8}}});
    store->assign(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
    node = sim.spawn(actors::dimension_node, actors::DimensionNodeSetup{0, 1, store});
  }

  actors::StartLine line(std::uint64_t version, std::uint64_t floats = 8) {
    actors::StartLine l{1, version, 0, 0, {{1, node, ""}, {2, peer, ""}}, {}, master};
    l.settings.model_floats = floats;
    l.settings.round.max_chunk_floats = 4;
    l.settings.round.reduce_threshold = l.settings.round.complete_threshold = 1.0;
    l.settings.round.quorum = allreduce::QuorumMode::fraction;
    l.settings.rounds_in_flight = 2;
    return l;
  }

  // What the node answers stats_atom with.
  actors::DimensionStats stats() { return sim.ask<actors::DimensionStats>(node, actors::stats_atom::value); }

  DeterministicSystem sim;
  caf::actor peer, master;
  std::shared_ptr<learner::ParameterStore> store;
  caf::actor node;
};

}  // namespace

TEST_CASE("a round message of a line version not yet announced waits for its StartLine") {
  DimensionNodeFixture f;
  // A fast peer's first chunk overtakes our StartLine.
  caf::anon_send(f.node, actors::ScatterChunk{{1, 2, 0, 0, 1}, 1, 0, {{10, 20, 30, 40}}});
  f.sim.run();
  CHECK(messages(f.peer).empty());
  CHECK(state_of<actors::DimensionNodeState>(f.node).early.size() == 1);
  caf::anon_send(f.node, f.line(2));
  f.sim.run();
  // Round 1 went to worker slot 1 % 2, which started the round on that chunk: it scattered our block 1 to the
  // peer, and our block 0, which got both contributions at once, has its mean sent to the peer too.
  const auto scattered = take<actors::ScatterChunk>(f.peer);
  const auto reduced = take<actors::ReducedChunk>(f.peer);
  CHECK_MESSAGE(messages(f.peer).empty(), describe(f.peer));
  REQUIRE(scattered.size() == 1);
  CHECK(scattered[0].key == allreduce::RoundKey{1, 2, 0, 0, 1});
  CHECK(scattered[0].from == 0);
  CHECK(scattered[0].offset == 4);
  CHECK(scattered[0].data.values == std::vector<float>{5, 6, 7, 8});
  REQUIRE(reduced.size() == 1);
  CHECK(reduced[0].key == allreduce::RoundKey{1, 2, 0, 0, 1});
  CHECK(reduced[0].offset == 0);
  CHECK(reduced[0].count == 2);
  CHECK(reduced[0].data.values == std::vector<float>{5.5f, 11, 16.5f, 22});
  CHECK(messages(f.master).empty());  // the round waits for the peer's block
  const auto& s = state_of<actors::DimensionNodeState>(f.node);
  CHECK(s.early.size() == 0);
  REQUIRE(s.workers.size() == 2);
  CHECK(state_of<actors::WorkerState>(s.workers[1]).round.has_value());
  CHECK_FALSE(state_of<actors::WorkerState>(s.workers[0]).round.has_value());
  const auto stats = f.stats();
  CHECK(stats.layout_version == 2);
  CHECK(stats.peers == 2);
  CHECK(stats.rounds == actors::RoundStats{});
}

TEST_CASE("early messages of a superseded line version are dropped and counted; those of the newest wait") {
  DimensionNodeFixture f;
  caf::anon_send(f.node, actors::ScatterChunk{{1, 2, 0, 0, 0}, 1, 0, {{10, 20, 30, 40}}});
  caf::anon_send(f.node, actors::StartRound{{1, 2, 0, 0, 0}});
  caf::anon_send(f.node, actors::StartRound{{1, 3, 0, 0, 0}});  // a newer layout supersedes version 2
  caf::anon_send(f.node, actors::ScatterChunk{{1, 2, 0, 0, 0}, 1, 0, {{10, 20, 30, 40}}});  // late, for version 2
  caf::anon_send(f.node, actors::ScatterChunk{{1, 3, 0, 0, 0}, 1, 0, std::vector<float>(9)});  // longer than N
  f.sim.run();
  CHECK(f.stats().rounds == actors::RoundStats{.malformed = 1, .early_dropped = 3});
  CHECK(state_of<actors::DimensionNodeState>(f.node).early.size() == 1);
  caf::anon_send(f.node, f.line(3));
  f.sim.run();
  CHECK(take<actors::ScatterChunk>(f.peer).size() == 1);  // round 0 of version 3 started: our block 1 scattered
  CHECK(state_of<actors::DimensionNodeState>(f.node).early.size() == 0);
}

TEST_CASE("a flood of early rounds keeps the newest ones, as many as a line can have open") {
  DimensionNodeFixture f;
  for (std::uint64_t r = 0; r < 20; ++r) caf::anon_send(f.node, actors::StartRound{{1, 2, 0, 0, r}});
  f.sim.run();
  CHECK(f.stats().rounds.early_dropped == 20 - allreduce::kRoundsInFlightRange.max);
  CHECK(static_cast<std::int64_t>(state_of<actors::DimensionNodeState>(f.node).early.rounds()) ==
        allreduce::kRoundsInFlightRange.max);
}

TEST_CASE("a round message of an older line version is dropped and counted; another dimension's is malformed") {
  DimensionNodeFixture f;
  caf::anon_send(f.node, f.line(2));
  caf::anon_send(f.node, actors::ScatterChunk{{1, 1, 0, 0, 0}, 1, 0, {{10, 20, 30, 40}}});
  caf::anon_send(f.node, actors::StartRound{{1, 1, 0, 0, 0}});
  caf::anon_send(f.node, actors::ScatterChunk{{1, 2, 4, 0, 0}, 1, 0, {{10, 20, 30, 40}}});  // another dimension
  // The same version, another line.
  caf::anon_send(f.node, actors::ReducedChunk{{1, 2, 0, 3, 0}, 1, 4, 2, {{10, 20, 30, 40}}});
  f.sim.run();
  CHECK(f.stats().rounds == actors::RoundStats{.stale_dropped = 2, .malformed = 2});
  CHECK(messages(f.peer).empty());  // nothing reached a worker
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
  f.sim.run();
  const auto stats = f.stats();
  CHECK(stats.rounds == actors::RoundStats{.malformed = 3});
  CHECK(stats.layout_version == 0);
  CHECK(state_of<actors::DimensionNodeState>(f.node).workers.empty());  // no worker was spawned for them
}

}  // namespace gridtrain::testing
