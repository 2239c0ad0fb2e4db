// A LineMaster driven directly: the test plays the members' DimensionNodes.
#include <doctest/doctest.h>

#include <chrono>
#include <vector>

#include "actors/line_master.hpp"
#include "actors/messages.hpp"
#include "actors/system_config.hpp"
#include "cluster_harness.hpp"

namespace gridtrain::testing {
namespace {

constexpr auto kWait = std::chrono::seconds(30);

struct LineMasterFixture {
  explicit LineMasterFixture(std::size_t peers, bool paced_by_every_steps = false)
      : system_config(cluster_config(2, 1.0)), system(system_config), self(system) {
    for (std::size_t i = 0; i < peers; ++i) members.push_back(std::make_unique<caf::scoped_actor>(system));
    master = system.spawn(actors::line_master, 0u, paced_by_every_steps);
  }
  ~LineMasterFixture() { caf::anon_send_exit(master, caf::exit_reason::kill); }

  actors::StartLine line(double advance, std::uint32_t k, std::uint64_t version = 1) {
    actors::StartLine l{1, version, 0, 5, {}, {}, {}};
    l.settings.model_floats = 8;
    l.settings.round.advance_threshold = advance;
    l.settings.rounds_in_flight = k;
    for (std::size_t i = 0; i < members.size(); ++i)
      l.peers.push_back({i + 1, caf::actor_cast<caf::actor>(*members[i]), ""});
    return l;
  }

  // The rounds started so far. The LineMaster handles its mailbox in order, so once it answers, everything it
  // sent for the earlier messages is in the members' mailboxes.
  std::uint64_t started() {
    std::uint64_t n = 0;
    self->request(master, kWait, actors::stats_atom::value)
        .receive([&](std::uint64_t x) { n = x; }, [](caf::error&) { FAIL("no answer"); });
    return n;
  }

  // Every StartRound member `i` has been sent so far, in order.
  std::vector<std::uint64_t> rounds_seen(std::size_t i) {
    std::vector<std::uint64_t> rounds;
    bool more = true;
    while (more)
      (*members[i])->receive([&](actors::StartRound& r) { rounds.push_back(r.key.round); },
                             [](actors::StartLine&) {}, caf::after(std::chrono::milliseconds(0)) >> [&] { more = false; });
    return rounds;
  }

  void done(std::uint64_t round, std::uint32_t from, std::uint64_t version = 1) {
    caf::anon_send(master, actors::RoundDone{{1, version, 0, 5, round}, from, 0});
  }

  actors::SystemConfig system_config;
  caf::actor_system system;
  caf::scoped_actor self;
  std::vector<std::unique_ptr<caf::scoped_actor>> members;
  caf::actor master;
};

}  // namespace

TEST_CASE("a line master forwards StartLine to every member with itself as the line's master") {
  LineMasterFixture f(3);
  caf::anon_send(f.master, f.line(1.0, 3));
  for (auto& m : f.members) {
    (*m)->receive(
        [&](actors::StartLine& l) {
          CHECK(l.line == 5);
          CHECK(l.peers.size() == 3);
          CHECK(l.line_master == f.master);
        },
        caf::after(kWait) >> [] { FAIL("no StartLine"); });
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
  f.done(0, 0, 4);
  f.done(0, 1, 4);
  CHECK(f.started() == 2);
}

TEST_CASE("a line of one peer runs no rounds") {
  LineMasterFixture f(1);
  caf::anon_send(f.master, f.line(1.0, 3));
  CHECK(f.started() == 0);
  CHECK(f.rounds_seen(0).empty());
}

TEST_CASE("a stopped line master starts nothing more") {
  LineMasterFixture f(2);
  caf::anon_send(f.master, f.line(1.0, 3, 1));
  CHECK(f.started() == 1);
  caf::anon_send(f.master, actors::StopLine{1, 2, 0, 5});
  f.done(0, 0);
  f.done(0, 1);
  CHECK(f.started() == 1);
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
}

}  // namespace gridtrain::testing
