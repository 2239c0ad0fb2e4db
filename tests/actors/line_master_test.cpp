// A LineMaster driven directly, message by message: recorders play the members' DimensionNodes.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "actors/line_master.hpp"
#include "actors/messages.hpp"
#include "deterministic_system.hpp"

namespace gridtrain::testing {
namespace {

struct LineMasterFixture {
  explicit LineMasterFixture(std::size_t peers, bool paced_by_every_steps = false) {
    for (std::size_t i = 0; i < peers; ++i) members.push_back(sim.recorder("member " + std::to_string(i)));
    master = sim.spawn(actors::line_master, 0u, paced_by_every_steps);
  }

  actors::StartLine line(double advance, std::uint32_t k, std::uint64_t version = 1) {
    actors::StartLine l{1, version, 0, 5, {}, {}, {}};
    l.settings.model_floats = 8;
    l.settings.round.advance_threshold = advance;
    l.settings.rounds_in_flight = k;
    for (std::size_t i = 0; i < members.size(); ++i) l.peers.push_back({i + 1, members[i], ""});
    return l;
  }

  // The rounds started so far, as the LineMaster answers stats_atom once every message sent before is handled.
  std::uint64_t started() {
    sim.run();
    return sim.ask<std::uint64_t>(master, actors::stats_atom::value);
  }

  // Every StartRound member `i` has been sent since the last call, in order.
  std::vector<std::uint64_t> rounds_seen(std::size_t i) {
    sim.run();
    std::vector<std::uint64_t> rounds;
    for (const auto& r : take<actors::StartRound>(members[i])) {
      CHECK(r.key == allreduce::RoundKey{1, 1, 0, 5, r.key.round});
      rounds.push_back(r.key.round);
    }
    return rounds;
  }

  void done(std::uint64_t round, std::uint32_t from, std::uint64_t version = 1) {
    caf::anon_send(master, actors::RoundDone{{1, version, 0, 5, round}, from, 0});
  }

  DeterministicSystem sim;
  std::vector<caf::actor> members;
  caf::actor master;
};

}  // namespace

TEST_CASE("a line master forwards StartLine to every member with itself as the line's master") {
  LineMasterFixture f(3);
  caf::anon_send(f.master, f.line(1.0, 3));
  f.sim.run();
  for (const auto& m : f.members) {
    // The StartLine first, then round 0: a member learns of its line before any round of it.
    REQUIRE_MESSAGE(messages(m).size() == 2, describe(m));
    REQUIRE(messages(m)[0].match_elements<actors::StartLine>());
    const auto& l = messages(m)[0].get_as<actors::StartLine>(0);
    CHECK(l.line == 5);
    CHECK(l.layout_version == 1);
    CHECK(l.peers.size() == 3);
    CHECK(l.line_master == f.master);
    REQUIRE(messages(m)[1].match_elements<actors::StartRound>());
    CHECK(messages(m)[1].get_as<actors::StartRound>(0).key == allreduce::RoundKey{1, 1, 0, 5, 0});
  }
}

TEST_CASE("a line master starts round r+1 once ceil(θa·p) peers finished round r, with at most k in flight") {
  LineMasterFixture f(3);
  caf::anon_send(f.master, f.line(0.5, 2));  // quorum(0.5, 3) = 2
  CHECK(f.started() == 1);
  f.done(0, 0);
  CHECK(f.started() == 1);  // one of three is below the advance quorum
  f.done(0, 1);
  CHECK(f.started() == 2);  // two of three: round 1 starts, although member 2 has not finished round 0
  f.done(1, 0);
  f.done(1, 1);
  CHECK(f.started() == 2);  // rounds 0 and 1 still wait for member 2: k = 2 are in flight
  f.done(0, 2);
  CHECK(f.started() == 3);  // round 0 is out of flight; round 2 starts
  for (std::size_t i = 0; i < 3; ++i) CHECK(f.rounds_seen(i) == std::vector<std::uint64_t>{0, 1, 2});
}

TEST_CASE("a line master ignores a RoundDone of another layout version and a peer index outside the line") {
  LineMasterFixture f(2);
  caf::anon_send(f.master, f.line(1.0, 3, 4));
  CHECK(f.started() == 1);
  f.done(0, 0, 3);
  f.done(0, 1, 3);
  f.done(0, 9, 4);
  CHECK(f.started() == 1);
  CHECK(state_of<actors::LineMasterState>(f.master).stale == 2);
  CHECK(state_of<actors::LineMasterState>(f.master).bad_messages == 1);
  f.done(0, 0, 4);
  f.done(0, 1, 4);
  CHECK(f.started() == 2);
}

TEST_CASE("a line of one peer runs no rounds") {
  LineMasterFixture f(1);
  caf::anon_send(f.master, f.line(1.0, 3));
  CHECK(f.started() == 0);
  CHECK(f.rounds_seen(0).empty());
  CHECK(received<actors::StartLine>(f.members[0]).size() == 1);
}

TEST_CASE("a stopped line master starts nothing more") {
  LineMasterFixture f(2);
  caf::anon_send(f.master, f.line(1.0, 3, 1));
  CHECK(f.started() == 1);
  caf::anon_send(f.master, actors::StopLine{1, 2, 0, 5});
  f.done(0, 0);
  f.done(0, 1);
  CHECK(f.started() == 1);
  for (std::size_t i = 0; i < 2; ++i) CHECK(f.rounds_seen(i) == std::vector<std::uint64_t>{0});
}

TEST_CASE("paced by every_steps, a line master runs exactly the rounds allowed") {
  LineMasterFixture f(2, true);
  caf::anon_send(f.master, f.line(1.0, 3));
  CHECK(f.started() == 0);
  caf::anon_send(f.master, actors::allow_rounds_atom::value, std::uint64_t{2});
  CHECK(f.started() == 1);
  f.done(0, 0);
  f.done(0, 1);
  CHECK(f.started() == 2);
  f.done(1, 0);
  f.done(1, 1);
  CHECK(f.started() == 2);
  for (std::size_t i = 0; i < 2; ++i) CHECK(f.rounds_seen(i) == std::vector<std::uint64_t>{0, 1});
}

}  // namespace gridtrain::testing
