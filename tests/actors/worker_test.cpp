// A Worker driven directly with crafted messages: the test plays its peer, its LineMaster and its parent.
#include <doctest/doctest.h>

#include <chrono>

#include "actors/messages.hpp"
#include "actors/system_config.hpp"
#include "actors/worker.hpp"
#include "cluster_harness.hpp"

namespace gridtrain::testing {
namespace {

using actors::ReducedChunk;
using actors::RoundDone;
using actors::ScatterChunk;
using allreduce::RoundKey;

constexpr auto kWait = std::chrono::seconds(30);

// A line of two: the worker under test is peer 0 (node 1), the test's `peer` actor is peer 1 (node 2).
// N = 8 floats in chunks of 2: block 0 = [0, 4) is the worker's, block 1 = [4, 8) the peer's.
struct WorkerFixture {
  WorkerFixture() : system_config(cluster_config(2, 1.0)), system(system_config), peer(system), master(system), parent(system) {
    store = std::make_shared<learner::ParameterStore>(std::vector<learner::TensorSpec>{{"a", {3}}, {"b", {5}}});
    store->assign(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
    worker = system.spawn(actors::worker, actors::WorkerSetup{0, 0, 1, store, caf::actor_cast<caf::actor>(parent)});
  }
  ~WorkerFixture() { caf::anon_send_exit(worker, caf::exit_reason::kill); }

  actors::StartLine line(std::uint64_t version, bool timeout_quorum = false) {
    actors::LineSettings s;
    s.model_floats = 8;
    s.round.max_chunk_floats = 2;
    s.round.elastic_rate = 1.0;
    s.rounds_in_flight = 1;
    if (timeout_quorum) {
      s.round.quorum = allreduce::QuorumMode::timeout;
      s.round.quorum_timeout_ms = 50;
      s.round.reduce_threshold = s.round.complete_threshold = 0.5;
    }
    return {1, version, 0, 0, {{1, caf::actor{}, ""}, {2, caf::actor_cast<caf::actor>(peer), ""}}, s, caf::actor_cast<caf::actor>(master)};
  }

  static RoundKey key(std::uint64_t round, std::uint64_t version = 1) { return {1, version, 0, 0, round}; }

  // The scatter chunks the worker sends the peer for one round: block 1, two chunks.
  std::vector<ScatterChunk> scatter_to_peer() {
    std::vector<ScatterChunk> got;
    for (int i = 0; i < 2; ++i)
      peer->receive([&](ScatterChunk& c) { got.push_back(c); }, caf::after(kWait) >> [] { FAIL("no scatter chunk"); });
    return got;
  }

  RoundDone round_done() {
    RoundDone done;
    master->receive([&](RoundDone& d) { done = d; }, caf::after(kWait) >> [] { FAIL("no RoundDone"); });
    return done;
  }

  actors::RoundStats stats() {
    actors::RoundStats out;
    peer->request(worker, kWait, actors::stats_atom::value)
        .receive([&](actors::RoundStats& s) { out = s; }, [](caf::error&) { FAIL("no stats"); });
    return out;
  }

  actors::SystemConfig system_config;
  caf::actor_system system;
  caf::scoped_actor peer, master, parent;
  std::shared_ptr<learner::ParameterStore> store;
  caf::actor worker;
};

}  // namespace

TEST_CASE("a worker averages its line's model: scatter, reduce, gather, elastic update, RoundDone") {
  WorkerFixture f;
  caf::anon_send(f.worker, f.line(1));
  caf::anon_send(f.worker, actors::StartRound{f.key(0)});
  const auto sent = f.scatter_to_peer();
  REQUIRE(sent.size() == 2);
  CHECK(sent[0].offset == 4);
  CHECK(sent[0].data.values == std::vector<float>{5, 6});
  CHECK(sent[1].offset == 6);
  CHECK(sent[1].data.values == std::vector<float>{7, 8});
  // The peer contributes to our block (values 11..14); we reduce it and send the means back.
  caf::anon_send(f.worker, ScatterChunk{f.key(0), 1, 0, {{11, 12}}});
  caf::anon_send(f.worker, ScatterChunk{f.key(0), 1, 2, {{13, 14}}});
  for (int i = 0; i < 2; ++i) {
    f.peer->receive(
        [&](ReducedChunk& r) {
          CHECK(r.count == 2);
          CHECK(r.data.values == (r.offset == 0 ? std::vector<float>{6, 7} : std::vector<float>{8, 9}));
        },
        caf::after(kWait) >> [] { FAIL("no reduced chunk"); });
  }
  // The peer's block means complete the round.
  caf::anon_send(f.worker, ReducedChunk{f.key(0), 1, 4, 2, {{50, 60}}});
  caf::anon_send(f.worker, ReducedChunk{f.key(0), 1, 6, 2, {{70, 80}}});
  const RoundDone done = f.round_done();
  CHECK(done.key == f.key(0));
  CHECK(done.from == 0);
  CHECK(done.chunks_missing == 0);
  CHECK(read(*f.store) == std::vector<float>{6, 7, 8, 9, 50, 60, 70, 80});
  CHECK(f.stats().rounds_done == 1);
}

TEST_CASE("a message of an older round is dropped and counted") {
  WorkerFixture f;
  caf::anon_send(f.worker, f.line(1));
  caf::anon_send(f.worker, actors::StartRound{f.key(1)});
  f.scatter_to_peer();
  caf::anon_send(f.worker, ScatterChunk{f.key(0), 1, 0, {{100, 100}}});
  caf::anon_send(f.worker, ReducedChunk{f.key(0), 1, 4, 2, {{100, 100}}});
  // And one of an older layout version of the line.
  caf::anon_send(f.worker, ScatterChunk{f.key(1, 0), 1, 0, {{100, 100}}});
  CHECK(eventually([&] { return f.stats().stale_dropped == 3; }));
  // Round 1 is untouched: it completes on its own messages alone.
  caf::anon_send(f.worker, ScatterChunk{f.key(1), 1, 0, {{1, 2}}});
  caf::anon_send(f.worker, ScatterChunk{f.key(1), 1, 2, {{3, 4}}});
  caf::anon_send(f.worker, ReducedChunk{f.key(1), 1, 4, 2, {{5, 6}}});
  caf::anon_send(f.worker, ReducedChunk{f.key(1), 1, 6, 2, {{7, 8}}});
  CHECK(f.round_done().key == f.key(1));
  CHECK(read(*f.store) == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
}

TEST_CASE("a message of a newer round makes the worker complete its current round, then start the newer one") {
  WorkerFixture f;
  caf::anon_send(f.worker, f.line(1));
  caf::anon_send(f.worker, actors::StartRound{f.key(0)});
  f.scatter_to_peer();
  // The peer has moved on to round 1 without a word for round 0.
  caf::anon_send(f.worker, ScatterChunk{f.key(1), 1, 0, {{11, 12}}});
  // Round 0 is finished with what it had: our block's mean over our own contribution, nothing for the peer's.
  const RoundDone done = f.round_done();
  CHECK(done.key == f.key(0));
  CHECK(done.chunks_missing == 2);
  // Round 1 started: fetched and scattered; the early chunk counted toward it.
  const auto sent = f.scatter_to_peer();
  CHECK(sent.front().key == f.key(1));
  const auto stats = f.stats();
  CHECK(stats.caught_up == 1);
  CHECK(stats.rounds_done == 1);
  CHECK(stats.quorum_shortfalls == 1);
  CHECK(read(*f.store) == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  caf::anon_send(f.worker, ScatterChunk{f.key(1), 1, 2, {{13, 14}}});
  caf::anon_send(f.worker, ReducedChunk{f.key(1), 1, 4, 2, {{50, 60}}});
  caf::anon_send(f.worker, ReducedChunk{f.key(1), 1, 6, 2, {{70, 80}}});
  CHECK(f.round_done().key == f.key(1));
  CHECK(read(*f.store) == std::vector<float>{6, 7, 8, 9, 50, 60, 70, 80});
}

TEST_CASE("a malformed chunk is dropped and counted, and the round goes on") {
  WorkerFixture f;
  caf::anon_send(f.worker, f.line(1));
  caf::anon_send(f.worker, actors::StartRound{f.key(0)});
  f.scatter_to_peer();
  caf::anon_send(f.worker, ScatterChunk{f.key(0), 1, 0, {{11, 12, 13}}});      // wrong length
  caf::anon_send(f.worker, ScatterChunk{f.key(0), 1, 4, {{11, 12}}});          // not our block
  caf::anon_send(f.worker, ScatterChunk{f.key(0), 7, 0, {{11, 12}}});          // no such peer
  caf::anon_send(f.worker, ReducedChunk{f.key(0), 1, 4, 9, {{50, 60}}});       // count above p
  caf::anon_send(f.worker, ScatterChunk{{1, 1, 3, 0, 0}, 1, 0, {{11, 12}}});  // another dimension
  CHECK(eventually([&] { return f.stats().malformed == 5; }));
  CHECK(f.stats().stale_dropped == 0);
  caf::anon_send(f.worker, ScatterChunk{f.key(0), 1, 0, {{11, 12}}});
  caf::anon_send(f.worker, ScatterChunk{f.key(0), 1, 2, {{13, 14}}});
  caf::anon_send(f.worker, ReducedChunk{f.key(0), 1, 4, 2, {{50, 60}}});
  caf::anon_send(f.worker, ReducedChunk{f.key(0), 1, 6, 2, {{70, 80}}});
  CHECK(f.round_done().key == f.key(0));
  CHECK(read(*f.store) == std::vector<float>{6, 7, 8, 9, 50, 60, 70, 80});
}

TEST_CASE("a new line drops the round in progress without an update") {
  WorkerFixture f;
  caf::anon_send(f.worker, f.line(1));
  caf::anon_send(f.worker, actors::StartRound{f.key(0)});
  f.scatter_to_peer();
  caf::anon_send(f.worker, ScatterChunk{f.key(0), 1, 0, {{11, 12}}});
  caf::anon_send(f.worker, f.line(2));
  CHECK(eventually([&] { return f.stats().abandoned == 1; }));
  // Late messages of the old line are stale now; the store never saw a partial update.
  caf::anon_send(f.worker, ReducedChunk{f.key(0), 1, 4, 2, {{50, 60}}});
  CHECK(eventually([&] { return f.stats().stale_dropped == 1; }));
  CHECK(f.stats().rounds_done == 0);
  CHECK(read(*f.store) == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  bool any_done = false;
  f.master->receive([&](RoundDone&) { any_done = true; }, caf::after(std::chrono::milliseconds(0)) >> [] {});
  CHECK_FALSE(any_done);
}

TEST_CASE("in timeout quorum mode, the deadline lets a round complete without a silent peer") {
  WorkerFixture f;
  caf::anon_send(f.worker, f.line(1, true));
  caf::anon_send(f.worker, actors::StartRound{f.key(0)});
  f.scatter_to_peer();
  // The peer says nothing. After quorum_timeout_ms, a quorum of 1 of 2 suffices for the reduce and for the
  // completion (θ = 0.5): our block is averaged over our contribution only; the peer's block keeps its values.
  const RoundDone done = f.round_done();
  CHECK(done.key == f.key(0));
  CHECK(done.chunks_missing == 2);
  CHECK(read(*f.store) == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(f.stats().quorum_shortfalls == 1);
}

}  // namespace gridtrain::testing
