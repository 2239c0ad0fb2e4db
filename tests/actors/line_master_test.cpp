// A LineMaster driven directly, message by message: recorders play the members' DimensionNodes.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "actors/line_master.hpp"
#include "actors/messages.hpp"
#include "deterministic_system.hpp"

namespace gridtrain::testing {
namespace {

struct LineMasterFixture {
  explicit LineMasterFixture(std::size_t peers, bool paced_by_every_steps = false,
                             std::chrono::milliseconds settle = std::chrono::milliseconds(0)) {
    for (std::size_t i = 0; i < peers; ++i) members.push_back(sim.recorder("member " + std::to_string(i)));
    if (paced_by_every_steps) allowance = std::make_shared<actors::RoundAllowance>();
    master = sim.spawn(actors::line_master, actors::LineMasterSetup{0u, allowance, settle});
  }

  // The node's learner allows `rounds` more: a grant, and the wake-up the node sends (it always may).
  void allow(std::uint64_t rounds) {
    allowance->grant(rounds);
    caf::anon_send(master, actors::allow_rounds_atom::value);
  }

  actors::StartLine line(double advance, std::uint32_t k, std::uint64_t version = 1) {
    actors::StartLine l{1, version, 0, 5, {}, {}, {}};
    l.settings.model_floats = 8;
    l.settings.round.advance_threshold = advance;
    l.settings.round.quorum = allreduce::QuorumMode::fraction;  // timeout mode: timeout_line()
    l.settings.rounds_in_flight = k;
    for (std::size_t i = 0; i < members.size(); ++i) l.peers.push_back({i + 1, members[i], "", ""});
    return l;
  }

  // The same line in timeout quorum mode, its deadline 200 ms.
  actors::StartLine timeout_line(double advance, std::uint32_t k) {
    actors::StartLine l = line(advance, k);
    l.settings.round.quorum = allreduce::QuorumMode::timeout;
    l.settings.round.quorum_timeout_ms = 200;
    return l;
  }

  // The rounds started so far, as the LineMaster answers stats_atom once every message sent before is handled.
  std::uint64_t started() {
    sim.run();
    return sim.ask<std::uint64_t>(master, actors::stats_atom::value);
  }

  // The (layout version, round) of every StartRound member `i` has been sent since the last call, in order.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> versioned_rounds_seen(std::size_t i) {
    sim.run();
    std::vector<std::pair<std::uint64_t, std::uint64_t>> rounds;
    for (const auto& r : take<actors::StartRound>(members[i])) rounds.emplace_back(r.key.layout_version, r.key.round);
    return rounds;
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
  std::shared_ptr<actors::RoundAllowance> allowance;  // paced: the node's grants
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

TEST_CASE("a line master starts round r+1 once ceil(θa·p) peers finished round r, and never waits for the rest") {
  LineMasterFixture f(3);
  caf::anon_send(f.master, f.line(0.5, 2));  // quorum(0.5, 3) = 2; k = 2
  CHECK(f.started() == 1);
  f.done(0, 0);
  CHECK(f.started() == 1);  // one of three is below the advance quorum
  f.done(0, 1);
  CHECK(f.started() == 2);  // two of three: round 1 starts, although member 2 has not finished round 0
  f.done(1, 0);
  f.done(1, 1);
  // Round 2 starts too, although member 2 finished neither round: k = 2 rounds stay open, so round 0, the oldest,
  // is retired without its report. Member 2 catches up by round key on the rounds its Worker slots receive.
  CHECK(f.started() == 3);
  const auto& s = state_of<actors::LineMasterState>(f.master);
  CHECK(s.retired_early == 1);
  REQUIRE(s.open.size() == 2);
  CHECK(s.open.begin()->first == 1);
  f.done(0, 2);  // late, for a retired round: nothing changes
  CHECK(f.started() == 3);
  CHECK(state_of<actors::LineMasterState>(f.master).open.size() == 2);
  for (std::size_t i = 0; i < 3; ++i) CHECK(f.rounds_seen(i) == std::vector<std::uint64_t>{0, 1, 2});
}

TEST_CASE("a stalled peer does not stop its line: rounds go on at the quorum, at most k open") {
  LineMasterFixture f(4);
  caf::anon_send(f.master, f.line(0.75, 3));  // quorum(0.75, 4) = 3
  for (std::uint64_t r = 0; r < 20; ++r) {
    CHECK(f.started() == r + 1);
    for (std::uint32_t from = 0; from < 3; ++from) f.done(r, from);  // member 3 never reports
  }
  CHECK(f.started() == 21);
  CHECK(state_of<actors::LineMasterState>(f.master).open.size() == 3);
  CHECK(state_of<actors::LineMasterState>(f.master).retired_early == 18);
}

TEST_CASE("in timeout quorum mode a line master waits for every peer until the deadline, then for the quorum") {
  LineMasterFixture f(4);
  caf::anon_send(f.master, f.timeout_line(0.75, 3));
  CHECK(f.started() == 1);
  for (std::uint32_t from = 0; from < 3; ++from) f.done(0, from);
  CHECK(f.started() == 1);  // a quorum, but the deadline has not passed: wait for member 3
  f.sim.advance_time(std::chrono::milliseconds(199));
  CHECK(f.started() == 1);
  f.sim.advance_time(std::chrono::milliseconds(1));  // round 0's deadline
  CHECK(f.started() == 2);
  for (std::uint32_t from = 0; from < 4; ++from) f.done(1, from);
  CHECK(f.started() == 3);  // everyone, before the deadline: at once
  f.sim.advance_time(std::chrono::milliseconds(200));  // round 1's deadline passes after it closed: no effect
  CHECK(f.started() == 3);
}

TEST_CASE("in timeout mode a peer that reported none of the last two rounds is not waited for, until it reports") {
  using std::chrono::milliseconds;
  LineMasterFixture f(3);
  caf::anon_send(f.master, f.timeout_line(0.5, 1));
  CHECK(f.started() == 1);
  // Rounds 0 and 1: members 0 and 1 report at once; each round waits for member 2 until its deadline.
  for (std::uint64_t round = 0; round < 2; ++round) {
    f.done(round, 0);
    f.done(round, 1);
    CHECK(f.started() == round + 1);
    f.sim.advance_time(milliseconds(200));
    CHECK(f.started() == round + 2);
  }
  // Round 2: member 2 is silent; the round advances as soon as the others report.
  f.done(2, 0);
  CHECK(f.started() == 3);
  f.done(2, 1);
  CHECK(f.started() == 4);
  // Member 2 reports round 3 (it is back): round 4 waits for it again, until its deadline.
  f.done(3, 2);
  f.done(3, 0);
  f.done(3, 1);
  CHECK(f.started() == 5);
  f.done(4, 0);
  f.done(4, 1);
  CHECK(f.started() == 5);
  f.sim.advance_time(milliseconds(200));
  CHECK(f.started() == 6);
}

TEST_CASE("in timeout mode a peer that holds the line up is not waited for while it is late, then waited for again") {
  using std::chrono::milliseconds;
  LineMasterFixture f(3);
  caf::anon_send(f.master, f.timeout_line(0.5, 3));
  CHECK(f.started() == 1);
  std::uint64_t round = 0;
  // (The reports are handled, and so timed, at f.started(), which runs the system.)
  auto all_report = [&](milliseconds took) {
    f.sim.advance_time(took);
    for (std::uint32_t m = 0; m < 3; ++m) f.done(round, m);
    CHECK(f.started() == round + 2);
    ++round;
  };
  for (int i = 0; i < 5; ++i) all_report(milliseconds(2));  // a line's first rounds are not counted
  // Member 2 reports 40 ms after the others: the round waits for it (it is not late yet), and now it is.
  f.done(round, 0);
  f.done(round, 1);
  CHECK(f.started() == round + 1);
  f.sim.advance_time(milliseconds(40));
  f.done(round, 2);
  CHECK(f.started() == round + 2);
  ++round;
  // The next round advances as soon as members 0 and 1 report; member 2 reports it later.
  f.done(round, 0);
  f.done(round, 1);
  CHECK(f.started() == round + 2);
  f.done(round, 2);
  ++round;
  // It keeps up for a while: waited for again, a round without it waits for its deadline.
  for (int i = 0; i < 30; ++i) all_report(milliseconds(3));
  f.done(round, 0);
  f.done(round, 1);
  CHECK(f.started() == round + 1);
  f.sim.advance_time(milliseconds(200));
  CHECK(f.started() == round + 2);
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

TEST_CASE("paced by every_steps, a line master holds at most k rounds in its budget") {
  LineMasterFixture f(2, true);
  caf::anon_send(f.master, f.line(1.0, 3));
  CHECK(f.started() == 0);
  f.done(0, 0);  // stray: no round is open
  f.allow(100);  // a stalled line's backlog
  CHECK(f.started() == 1);
  CHECK(state_of<actors::LineMasterState>(f.master).every_steps_budget == 2u);  // k = 3, one of them spent
  for (std::uint64_t r = 0; r < 5; ++r) {
    f.done(r, 0);
    f.done(r, 1);
  }
  CHECK(f.started() == 3);  // not 100
}

TEST_CASE("a grant asks for a wake-up only of the line masters that wait for one, and reaches every dimension") {
  actors::RoundAllowance allowance;
  std::uint64_t taken0 = 0, taken1 = 0;
  CHECK(allowance.grant(2) == 0);  // nobody waits: no message
  CHECK(allowance.take(0, taken0) == 2);
  CHECK(allowance.take(1, taken1) == 2);  // each dimension's master takes each grant
  CHECK(allowance.take(0, taken0) == 0);
  allowance.wait(0);
  allowance.wait(3);
  CHECK(allowance.grant(1) == 0b1001);  // wake those two
  CHECK(allowance.grant(1) == 0);       // once
  CHECK(allowance.take(0, taken0) == 2);
  CHECK(allowance.grant(1u, 3) == 0);  // one dimension only
  CHECK(allowance.take(0, taken0) == 0);
  CHECK(allowance.take(1, taken1) == 5);

  // A paced master whose budget runs out waits: the next grant wakes it; a dormant one (no line) never waits.
  LineMasterFixture dormant(2, true);
  dormant.sim.run();
  CHECK(dormant.allowance->grant(1) == 0);
  LineMasterFixture f(2, true);
  caf::anon_send(f.master, f.line(1.0, 3));
  CHECK(f.started() == 0);
  CHECK(f.allowance->grant(1) == 0b1);  // the line (dim 0) wanted a round and had none: the caller wakes it
  caf::anon_send(f.master, actors::allow_rounds_atom::value);
  CHECK(f.started() == 1);
  CHECK(f.allowance->grant(1) == 0);  // busy with that round (not advanced): nobody waits
  f.done(0, 0);
  f.done(0, 1);
  CHECK(f.started() == 2);  // the round done takes the grant that came meanwhile, without a message
  f.done(1, 0);
  f.done(1, 1);
  CHECK(f.started() == 2);
  CHECK(f.allowance->grant(1) == 0b1);  // then none is left: it waits again
}

TEST_CASE("paced by every_steps, a line master runs exactly the rounds allowed") {
  LineMasterFixture f(2, true);
  caf::anon_send(f.master, f.line(1.0, 3));
  CHECK(f.started() == 0);
  f.allow(2);
  CHECK(f.started() == 1);
  f.done(0, 0);
  f.done(0, 1);
  CHECK(f.started() == 2);
  f.done(1, 0);
  f.done(1, 1);
  CHECK(f.started() == 2);
  for (std::size_t i = 0; i < 2; ++i) CHECK(f.rounds_seen(i) == std::vector<std::uint64_t>{0, 1});
}

TEST_CASE("a line restarted again within the settle time runs no round until it is that long unchanged") {
  using std::chrono::milliseconds;
  LineMasterFixture f(3, false, milliseconds(200));
  caf::anon_send(f.master, f.line(1.0, 3, 1));
  CHECK(f.started() == 1);  // the first StartLine: nothing came before it, so round 0 starts at once
  for (std::size_t i = 0; i < 3; ++i)
    CHECK(f.versioned_rounds_seen(i) == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{1, 0}});
  f.sim.advance_time(milliseconds(50));
  caf::anon_send(f.master, f.line(1.0, 3, 2));  // 50 ms later: a burst
  CHECK(f.started() == 1);
  f.sim.advance_time(milliseconds(150));
  caf::anon_send(f.master, f.line(1.0, 3, 3));  // and again: the wait starts over
  f.sim.run();                                  // (handled now, before the clock moves on)
  f.sim.advance_time(milliseconds(199));
  CHECK(f.started() == 1);
  for (std::size_t i = 0; i < 3; ++i) {
    // Every member learned of each version at once; only the rounds wait.
    CHECK(received<actors::StartLine>(f.members[i]).size() == 3);
    CHECK(f.versioned_rounds_seen(i).empty());
  }
  f.sim.advance_time(milliseconds(1));  // 200 ms without a newer StartLine
  CHECK(f.started() == 2);
  for (std::size_t i = 0; i < 3; ++i)
    CHECK(f.versioned_rounds_seen(i) == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{3, 0}});
  caf::anon_send(f.master, actors::RoundDone{{1, 3, 0, 5, 0}, 0, 0});
  caf::anon_send(f.master, actors::RoundDone{{1, 3, 0, 5, 0}, 1, 0});
  caf::anon_send(f.master, actors::RoundDone{{1, 3, 0, 5, 0}, 2, 0});
  CHECK(f.started() == 3);  // once settled, rounds follow each other as ever
  f.sim.advance_time(milliseconds(1000));  // the replaced timers fired long ago, and changed nothing
  CHECK(f.started() == 3);
}

TEST_CASE("an isolated restart (a failure, one join) starts its line's round at once, whatever the settle time") {
  using std::chrono::milliseconds;
  LineMasterFixture f(2, false, milliseconds(200));
  caf::anon_send(f.master, f.line(1.0, 3, 1));
  CHECK(f.started() == 1);
  f.sim.advance_time(milliseconds(999));
  caf::anon_send(f.master, f.line(1.0, 3, 2));  // within 5 settle times: a burst
  CHECK(f.started() == 1);
  f.sim.advance_time(milliseconds(1000));  // it settled (one round) and was left alone for 5 settle times
  CHECK(f.started() == 2);
  caf::anon_send(f.master, f.line(1.0, 3, 3));
  CHECK(f.started() == 3);  // (started() handles the StartLine before the clock moves on)
  CHECK(f.versioned_rounds_seen(0) ==
        std::vector<std::pair<std::uint64_t, std::uint64_t>>{{1, 0}, {2, 0}, {3, 0}});
  // A stale StartLine is dropped before it counts as a restart: version 4 right after it is still isolated.
  f.sim.advance_time(milliseconds(1000));
  caf::anon_send(f.master, f.line(1.0, 3, 1));
  caf::anon_send(f.master, f.line(1.0, 3, 4));
  CHECK(f.started() == 4);
}

TEST_CASE("with no settle time a burst of restarts starts a round at each") {
  LineMasterFixture f(2);
  for (std::uint64_t v = 1; v <= 3; ++v) caf::anon_send(f.master, f.line(1.0, 3, v));
  CHECK(f.started() == 3);
}

TEST_CASE("a settling line paced by every_steps keeps its budget for when it settles") {
  using std::chrono::milliseconds;
  LineMasterFixture f(2, true, milliseconds(100));
  caf::anon_send(f.master, f.line(1.0, 3, 1));
  caf::anon_send(f.master, f.line(1.0, 3, 2));
  f.sim.run();  // both lines in: the second, a burst's, settles
  f.allow(1);
  CHECK(f.started() == 0);
  CHECK(state_of<actors::LineMasterState>(f.master).every_steps_budget == 1u);
  f.sim.advance_time(milliseconds(100));
  CHECK(f.started() == 1);
  CHECK(f.versioned_rounds_seen(1) == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{2, 0}});
}


// A StartLine relayed through a node that died is lost (CAF 0.17): the member it was for sat out every round of
// its line. The LineMaster sends the line again to a peer silent on its rounds for a second.
TEST_CASE("a peer silent on its line's rounds for a second is sent the line and the open rounds again") {
  using std::chrono::milliseconds;
  LineMasterFixture f(4);
  caf::anon_send(f.master, f.line(0.75, 2));  // quorum(0.75, 4) = 3: the line goes on without member 3
  f.sim.run();
  for (std::size_t i = 0; i < 4; ++i) take<actors::StartLine>(f.members[i]);
  std::uint64_t round = 0;
  auto run_rounds = [&](milliseconds span) {  // a round every 100 ms, reported by members 0-2
    for (auto t = milliseconds(0); t < span; t += milliseconds(100)) {
      for (std::uint32_t from = 0; from < 3; ++from) f.done(round, from);
      ++round;
      f.sim.run();
      f.sim.advance_time(milliseconds(100));
    }
    f.sim.run();
  };
  run_rounds(milliseconds(900));
  CHECK(received<actors::StartLine>(f.members[3]).empty());
  f.sim.advance_time(milliseconds(100));  // a second without a word from member 3
  f.sim.run();
  const auto again = take<actors::StartLine>(f.members[3]);
  REQUIRE(again.size() == 1);
  CHECK(again[0].layout_version == 1);
  CHECK(again[0].line_master == f.master);
  // And the StartRounds of the rounds open now (k = 2: the last two), after those it had been sent.
  CHECK(f.rounds_seen(3) == std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 8, 9});
  for (std::size_t i = 0; i < 3; ++i) CHECK(received<actors::StartLine>(f.members[i]).empty());  // they report
  CHECK(state_of<actors::LineMasterState>(f.master).nudges == 1);
  // Once it reports, it has another second; silent again, it is nudged again.
  f.done(round, 3);
  run_rounds(milliseconds(900));
  CHECK(received<actors::StartLine>(f.members[3]).empty());
  f.sim.advance_time(milliseconds(200));
  f.sim.run();
  CHECK(received<actors::StartLine>(f.members[3]).size() == 1);
  CHECK(state_of<actors::LineMasterState>(f.master).nudges == 2);
}

TEST_CASE("in timeout quorum mode, a silent peer is nudged though each round it misses closes at its deadline") {
  using std::chrono::milliseconds;
  LineMasterFixture f(3);
  caf::anon_send(f.master, f.timeout_line(0.5, 1));
  f.sim.run();
  for (std::size_t i = 0; i < 3; ++i) take<actors::StartLine>(f.members[i]);
  for (int t = 0; t < 11; ++t) {  // 1.1 s: members 0 and 1 report at once; member 2 never (silent after 2 rounds)
    const std::uint64_t round = state_of<actors::LineMasterState>(f.master).next_round - 1;
    f.done(round, 0);
    f.done(round, 1);
    f.sim.run();
    f.sim.advance_time(milliseconds(100));
    f.sim.run();
  }
  CHECK(received<actors::StartLine>(f.members[2]).size() == 1);
  CHECK(received<actors::StartLine>(f.members[0]).empty());
}

TEST_CASE("an idle line nudges nobody, and a dormant line master keeps no timer") {
  using std::chrono::milliseconds;
  LineMasterFixture f(2, true);  // paced: no round until allowed
  caf::anon_send(f.master, f.line(1.0, 1));
  f.sim.run();
  for (std::size_t i = 0; i < 2; ++i) take<actors::StartLine>(f.members[i]);
  f.sim.advance_time(milliseconds(5000));
  f.sim.run();
  for (std::size_t i = 0; i < 2; ++i) CHECK(received<actors::StartLine>(f.members[i]).empty());
  // A round after the long idle: the peers have a second from now to report it.
  f.allow(1);
  CHECK(f.started() == 1);
  f.sim.advance_time(milliseconds(900));
  f.done(0, 0);
  f.done(0, 1);
  f.sim.run();
  f.sim.advance_time(milliseconds(5000));
  f.sim.run();
  for (std::size_t i = 0; i < 2; ++i) CHECK(received<actors::StartLine>(f.members[i]).empty());
  caf::anon_send(f.master, actors::StopLine{1, 2, 0, 5});
  f.sim.run();
  f.sim.advance_time(milliseconds(1000));  // the last timer: it finds no line and sets no other
  f.sim.run();
  CHECK_FALSE(state_of<actors::LineMasterState>(f.master).nudge_pending);
  CHECK(f.sim.advance_time(milliseconds(5000)) == 0);
}

TEST_CASE("a line master that was stalled itself does not take its stall for its peers' silence") {
  using std::chrono::milliseconds;
  LineMasterFixture f(2);
  caf::anon_send(f.master, f.line(1.0, 1));
  f.sim.run();
  for (std::size_t i = 0; i < 2; ++i) take<actors::StartLine>(f.members[i]);
  f.sim.advance_time(milliseconds(5000));  // its second's timer comes 4 s late: this node was stopped
  f.sim.run();
  for (std::size_t i = 0; i < 2; ++i) CHECK(received<actors::StartLine>(f.members[i]).empty());
  f.sim.advance_time(milliseconds(999));
  f.sim.run();
  for (std::size_t i = 0; i < 2; ++i) CHECK(received<actors::StartLine>(f.members[i]).empty());
  f.sim.advance_time(milliseconds(1));  // a second since it woke, on time, and round 0 still unreported
  f.sim.run();
  for (std::size_t i = 0; i < 2; ++i) CHECK(received<actors::StartLine>(f.members[i]).size() == 1);
}

}  // namespace gridtrain::testing
