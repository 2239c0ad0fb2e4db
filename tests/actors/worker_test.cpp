// A Worker driven directly with crafted messages, message by message: recorders play its peer, its LineMaster and
// its parent.
#include <doctest/doctest.h>

#include <chrono>

#include "actors/messages.hpp"
#include "actors/worker.hpp"
#include "deterministic_system.hpp"
#include "test_support.hpp"

namespace gridtrain::testing {
namespace {

using actors::ReducedChunk;
using actors::RoundDone;
using actors::ScatterChunk;
using allreduce::RoundKey;
using namespace std::chrono_literals;

// A line of two: the worker under test is peer 0 (node 1), the `peer` recorder is peer 1 (node 2).
// N = 8 floats in chunks of 2: block 0 = [0, 4) is the worker's, block 1 = [4, 8) the peer's.
struct WorkerFixture {
  explicit WorkerFixture(std::chrono::milliseconds stall_limit = 0ms)
      : peer(sim.recorder("peer")), master(sim.recorder("line master")), parent(sim.recorder("parent")) {
    store = std::make_shared<learner::ParameterStore>(std::vector<learner::TensorSpec>{{"a", {3}}, {"b", {5}}});
    store->assign(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
    worker = sim.spawn(actors::worker, actors::WorkerSetup{0, 0, 1, store, parent, stall_limit});
  }

  actors::StartLine line(std::uint64_t version, bool timeout_quorum = false) {
    actors::LineSettings s;
    s.model_floats = 8;
    s.round.max_chunk_floats = 2;
    s.round.elastic_rate = 1.0;
    s.round.reduce_threshold = s.round.complete_threshold = 1.0;
    s.round.quorum = allreduce::QuorumMode::fraction;
    s.rounds_in_flight = 1;
    if (timeout_quorum) {
      s.round.quorum = allreduce::QuorumMode::timeout;
      s.round.quorum_timeout_ms = 50;
      s.round.reduce_threshold = s.round.complete_threshold = 0.5;
    }
    return {1, version, 0, 0, {{1, caf::actor{}, ""}, {2, peer, ""}}, s, master};
  }

  static RoundKey key(std::uint64_t round, std::uint64_t version = 1) { return {1, version, 0, 0, round}; }

  // The line, and round `round` started on it: the worker has scattered the peer's block to the peer.
  void start(std::uint64_t round, bool timeout_quorum = false) {
    caf::anon_send(worker, line(1, timeout_quorum));
    caf::anon_send(worker, actors::StartRound{key(round)});
    sim.run();
    const auto sent = take<ScatterChunk>(peer);
    REQUIRE_MESSAGE(sent.size() == 2, describe(peer));
    CHECK(sent[0].key == key(round));
  }

  // The peer's contribution to our block, chunk by chunk: values `a`..`a` + 3.
  void peer_contributes(std::uint64_t round, float a) {
    caf::anon_send(worker, ScatterChunk{key(round), 1, 0, {{a, a + 1}}});
    caf::anon_send(worker, ScatterChunk{key(round), 1, 2, {{a + 2, a + 3}}});
  }

  // The means of the peer's block, chunk by chunk: `first` then `second`.
  void peer_reduces(std::uint64_t round, std::vector<float> first, std::vector<float> second) {
    caf::anon_send(worker, ReducedChunk{key(round), 1, 4, 2, {std::move(first)}});
    caf::anon_send(worker, ReducedChunk{key(round), 1, 6, 2, {std::move(second)}});
  }

  // Runs, then expects exactly one RoundDone, for `round`, with `missing` chunks short; `expected` in the store.
  void expect_done(std::uint64_t round, const std::vector<float>& expected, std::uint32_t missing = 0) {
    sim.run();
    const auto done = take<RoundDone>(master);
    CHECK(messages(master).empty());
    REQUIRE(done.size() == 1);
    CHECK(done[0].key == key(round));
    CHECK(done[0].from == 0);
    CHECK(done[0].chunks_missing == missing);
    CHECK(read(*store) == expected);
  }

  // Lets `ticks` times 25 ms pass, the worker handling what falls due after each.
  void let_time_pass(int ticks) {
    for (int i = 0; i < ticks; ++i) {
      sim.advance_time(25ms);
      sim.run();
    }
  }

  // The worker's counters, as it answers stats_atom.
  actors::RoundStats stats() { return sim.ask<actors::RoundStats>(worker, actors::stats_atom::value); }

  // The counters the worker last published to its parent.
  actors::RoundStats published() {
    actors::RoundStats last;
    for (const caf::message& m : messages(parent)) {
      REQUIRE(m.match_elements<std::uint32_t, actors::RoundStats>());
      CHECK(m.get_as<std::uint32_t>(0) == 0);  // its slot
      last = m.get_as<actors::RoundStats>(1);
    }
    return last;
  }

  DeterministicSystem sim;
  caf::actor peer, master, parent;
  std::shared_ptr<learner::ParameterStore> store;
  caf::actor worker;
};

}  // namespace

TEST_CASE("a worker averages its line's model: scatter, reduce, gather, elastic update, RoundDone") {
  WorkerFixture f;
  caf::anon_send(f.worker, f.line(1));
  caf::anon_send(f.worker, actors::StartRound{f.key(0)});
  f.sim.run();
  const auto sent = take<ScatterChunk>(f.peer);
  CHECK(messages(f.peer).empty());
  REQUIRE(sent.size() == 2);
  CHECK(sent[0].key == f.key(0));
  CHECK(sent[0].from == 0);
  CHECK(sent[0].offset == 4);
  CHECK(sent[0].data.values == std::vector<float>{5, 6});
  CHECK(sent[1].offset == 6);
  CHECK(sent[1].data.values == std::vector<float>{7, 8});
  // The peer contributes to our block (values 11..14); we reduce it and send the means back, chunk by chunk.
  f.peer_contributes(0, 11);
  f.sim.run();
  const auto reduced = take<ReducedChunk>(f.peer);
  CHECK(messages(f.peer).empty());
  REQUIRE(reduced.size() == 2);
  for (const auto& r : reduced) {
    CHECK(r.key == f.key(0));
    CHECK(r.from == 0);
    CHECK(r.count == 2);
  }
  CHECK(reduced[0].offset == 0);
  CHECK(reduced[0].data.values == std::vector<float>{6, 7});
  CHECK(reduced[1].offset == 2);
  CHECK(reduced[1].data.values == std::vector<float>{8, 9});
  CHECK(messages(f.master).empty());  // not complete: the peer's block has no mean yet
  // The peer's block means complete the round.
  f.peer_reduces(0, {50, 60}, {70, 80});
  f.expect_done(0, {6, 7, 8, 9, 50, 60, 70, 80});
  CHECK(f.stats() == actors::RoundStats{.rounds_done = 1});
  CHECK(f.published() == actors::RoundStats{.rounds_done = 1});
}

TEST_CASE("a message of an older round is dropped and counted") {
  WorkerFixture f;
  f.start(1);
  caf::anon_send(f.worker, ScatterChunk{f.key(0), 1, 0, {{100, 100}}});
  caf::anon_send(f.worker, ReducedChunk{f.key(0), 1, 4, 2, {{100, 100}}});
  // And one of an older layout version of the line.
  caf::anon_send(f.worker, ScatterChunk{f.key(1, 0), 1, 0, {{100, 100}}});
  f.sim.run();
  CHECK(f.stats() == actors::RoundStats{.stale_dropped = 3});
  CHECK(messages(f.peer).empty());
  CHECK(messages(f.master).empty());
  // Round 1 is untouched: it completes on its own messages alone.
  f.peer_contributes(1, 1);
  f.peer_reduces(1, {5, 6}, {7, 8});
  f.expect_done(1, {1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(f.stats() == actors::RoundStats{.rounds_done = 1, .stale_dropped = 3});
}

TEST_CASE("a message of a newer round makes the worker complete its current round, then start the newer one") {
  WorkerFixture f;
  f.start(0);
  // The peer has moved on to round 1 without a word for round 0.
  caf::anon_send(f.worker, ScatterChunk{f.key(1), 1, 0, {{11, 12}}});
  f.sim.run();
  // Round 0 is finished with what it had: our block's mean over our own contribution, sent to the peer with its
  // count of 1; nothing for the peer's block, which keeps its values.
  f.expect_done(0, {1, 2, 3, 4, 5, 6, 7, 8}, 2);
  const auto reduced = take<ReducedChunk>(f.peer);
  REQUIRE(reduced.size() == 3);
  CHECK(reduced[0].key == f.key(0));
  CHECK(reduced[0].count == 1);
  CHECK(reduced[0].data.values == std::vector<float>{1, 2});
  CHECK(reduced[1].key == f.key(0));
  CHECK(reduced[1].count == 1);
  CHECK(reduced[1].data.values == std::vector<float>{3, 4});
  // Round 1 started: fetched and scattered; the early chunk counted toward it: with our own contribution, its
  // chunk of our block has both and its mean went out at once.
  const auto sent = take<ScatterChunk>(f.peer);
  CHECK(messages(f.peer).empty());
  REQUIRE(sent.size() == 2);
  CHECK(sent[0].key == f.key(1));
  CHECK(sent[1].key == f.key(1));
  CHECK(reduced[2].key == f.key(1));
  CHECK(reduced[2].offset == 0);
  CHECK(reduced[2].count == 2);
  CHECK(reduced[2].data.values == std::vector<float>{6, 7});
  CHECK(f.stats() == actors::RoundStats{.rounds_done = 1, .caught_up = 1, .quorum_shortfalls = 1});
  CHECK(read(*f.store) == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  caf::anon_send(f.worker, ScatterChunk{f.key(1), 1, 2, {{13, 14}}});
  f.peer_reduces(1, {50, 60}, {70, 80});
  f.expect_done(1, {6, 7, 8, 9, 50, 60, 70, 80});
}

TEST_CASE("a malformed chunk is dropped and counted, and the round goes on") {
  WorkerFixture f;
  f.start(0);
  caf::anon_send(f.worker, ScatterChunk{f.key(0), 1, 0, {{11, 12, 13}}});      // wrong length
  caf::anon_send(f.worker, ScatterChunk{f.key(0), 1, 4, {{11, 12}}});          // not our block
  caf::anon_send(f.worker, ScatterChunk{f.key(0), 7, 0, {{11, 12}}});          // no such peer
  caf::anon_send(f.worker, ReducedChunk{f.key(0), 1, 4, 9, {{50, 60}}});       // count above p
  caf::anon_send(f.worker, ScatterChunk{{1, 1, 3, 0, 0}, 1, 0, {{11, 12}}});  // another dimension
  f.sim.run();
  CHECK(f.stats() == actors::RoundStats{.malformed = 5});
  CHECK(messages(f.peer).empty());
  f.peer_contributes(0, 11);
  f.peer_reduces(0, {50, 60}, {70, 80});
  f.expect_done(0, {6, 7, 8, 9, 50, 60, 70, 80});
  CHECK(f.stats() == actors::RoundStats{.rounds_done = 1, .malformed = 5});
}

TEST_CASE("a new line drops the round in progress without an update") {
  WorkerFixture f;
  f.start(0);
  caf::anon_send(f.worker, ScatterChunk{f.key(0), 1, 0, {{11, 12}}});
  caf::anon_send(f.worker, f.line(2));
  f.sim.run();
  CHECK(f.stats() == actors::RoundStats{.abandoned = 1});
  // Late messages of the old line are stale now; the store never saw a partial update.
  caf::anon_send(f.worker, ReducedChunk{f.key(0), 1, 4, 2, {{50, 60}}});
  f.sim.run();
  CHECK(f.stats() == actors::RoundStats{.abandoned = 1, .stale_dropped = 1});
  CHECK(read(*f.store) == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  CHECK_MESSAGE(messages(f.master).empty(), describe(f.master));  // no RoundDone, nor anything else
  // Our block's first chunk had both contributions before the line changed: its mean went out, nothing since.
  const auto reduced = take<ReducedChunk>(f.peer);
  REQUIRE(reduced.size() == 1);
  CHECK(reduced[0].offset == 0);
  CHECK(messages(f.peer).empty());
}

TEST_CASE("in timeout quorum mode, the deadline lets a round complete without a silent peer") {
  WorkerFixture f;
  f.start(0, true);
  // The peer says nothing. Until quorum_timeout_ms has passed, the round waits for it.
  f.sim.advance_time(49ms);
  f.sim.run();
  CHECK(messages(f.master).empty());
  CHECK(messages(f.peer).empty());
  // Then a quorum of 1 of 2 suffices for the reduce and for the completion (θ = 0.5): our block is averaged over
  // our contribution only (and sent to the peer); the peer's block keeps its values.
  CHECK(f.sim.advance_time(1ms) == 1);  // the deadline
  f.expect_done(0, {1, 2, 3, 4, 5, 6, 7, 8}, 2);
  const auto reduced = take<ReducedChunk>(f.peer);
  REQUIRE(reduced.size() == 2);
  CHECK(reduced[0].count == 1);
  CHECK(reduced[1].count == 1);
  CHECK(f.stats() == actors::RoundStats{.rounds_done = 1, .quorum_shortfalls = 1});
}

TEST_CASE("a worker that did not run for longer than the connection timeout sits out as long, then runs rounds") {
  WorkerFixture f(100ms);  // the connection timeout
  f.start(0);
  // The process is stopped for 300 ms: the first thing the worker runs after it is a tick, 275 ms late.
  f.sim.advance_time(300ms);
  f.sim.run();
  // It wakes to a backlog: the peer's chunks of round 0 and the LineMaster's next round. Its peers dropped its
  // connections long ago: it answers none of it, and drops round 0 without an update.
  f.peer_contributes(0, 11);
  caf::anon_send(f.worker, actors::StartRound{f.key(1)});
  f.sim.run();
  CHECK_MESSAGE(messages(f.peer).empty(), describe(f.peer));
  CHECK_MESSAGE(messages(f.master).empty(), describe(f.master));
  CHECK(f.stats() == actors::RoundStats{.abandoned = 1, .stale_dropped = 3});
  CHECK(read(*f.store) == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  // Sitting out ends 100 ms after it woke (the ticks, every 25 ms, keep it from counting as another stall);
  // then the same line runs rounds again.
  f.let_time_pass(4);
  caf::anon_send(f.worker, actors::StartRound{f.key(2)});
  f.sim.run();
  CHECK(take<ScatterChunk>(f.peer).size() == 2);
  f.peer_contributes(2, 11);
  f.peer_reduces(2, {50, 60}, {70, 80});
  f.expect_done(2, {6, 7, 8, 9, 50, 60, 70, 80});
}

TEST_CASE("a line with no rounds for longer than the connection timeout is no stall: the worker's ticks run") {
  WorkerFixture f(100ms);
  f.start(0);
  f.peer_contributes(0, 11);
  f.peer_reduces(0, {50, 60}, {70, 80});
  f.expect_done(0, {6, 7, 8, 9, 50, 60, 70, 80});
  take<ReducedChunk>(f.peer);
  // One second without a round, the worker running its ticks on time all along.
  f.let_time_pass(40);
  caf::anon_send(f.worker, actors::StartRound{f.key(1)});
  f.sim.run();
  CHECK(take<ScatterChunk>(f.peer).size() == 2);
  CHECK(f.stats() == actors::RoundStats{.rounds_done = 1});
}

}  // namespace gridtrain::testing
