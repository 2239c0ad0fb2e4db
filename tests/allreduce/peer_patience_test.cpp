// PeerPatience (allreduce/peer_patience.hpp): a peer unheard for two rounds in a row is silent until it is heard;
// a peer that comes well after the others in most rounds is late, and is waited for only a probe.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "allreduce/peer_patience.hpp"

using gridtrain::allreduce::PeerPatience;

TEST_CASE("two rounds unheard make a peer silent; one round missed does not; a frame heard ends it at once") {
  PeerPatience patience(3);
  const std::vector<std::uint8_t> all{1, 1, 1}, without_2{1, 1, 0};
  patience.round_done(without_2);
  CHECK_FALSE(patience.any_silent());  // one round missed: a late frame, perhaps
  patience.round_done(all);
  patience.round_done(without_2);
  CHECK_FALSE(patience.any_silent());  // not two in a row
  patience.round_done(without_2);
  CHECK(patience.any_silent());
  CHECK(patience.silent_peers()[2] == 1);
  CHECK(patience.silent_peers()[0] == 0);
  CHECK(patience.unheard_rounds(2) == 2);
  patience.round_done(without_2);
  CHECK(patience.unheard_rounds(2) == 3);
  patience.heard(2);  // its frame counted mid-round: waited for fully from now on
  CHECK_FALSE(patience.any_silent());
  CHECK(patience.unheard_rounds(2) == 0);
  patience.heard(7);  // not a peer of the line: nothing
  CHECK(patience.peers() == 3);
}

TEST_CASE("several peers silent at once, and back one by one") {
  PeerPatience patience(4);
  const std::vector<std::uint8_t> only_0{1, 0, 0, 0};
  patience.round_done(only_0);
  patience.round_done(only_0);
  CHECK(patience.silent_peers()[1] + patience.silent_peers()[2] + patience.silent_peers()[3] == 3);
  patience.heard(1);
  CHECK(patience.any_silent());
  patience.round_done(std::vector<std::uint8_t>{1, 1, 1, 1});
  CHECK_FALSE(patience.any_silent());
}

TEST_CASE("what is missing need not be waited for only where every peer not heard is silent (or late)") {
  PeerPatience patience(4);
  const std::vector<std::uint8_t> without_3{1, 1, 1, 0}, without_2_3{1, 1, 0, 0};
  CHECK_FALSE(patience.only_late_unheard(without_3));  // nobody silent yet
  patience.round_done(without_3);
  patience.round_done(without_3);
  CHECK(patience.only_late_unheard(without_3));
  CHECK_FALSE(patience.only_late_unheard(without_2_3));  // peer 2 is missing and not silent
  CHECK(patience.only_late_unheard(std::vector<std::uint8_t>{1, 1, 1, 1}));  // nothing missing
}

namespace {
constexpr std::int64_t kUnheard = PeerPatience::kUnheard;
constexpr std::int64_t kSelf = PeerPatience::kNotTimed;
constexpr std::int64_t ms = 1000;  // round_timed takes microseconds
}  // namespace

TEST_CASE("a peer that holds its line up for more than a quarter of its time is late; waited for again as it keeps up") {
  PeerPatience patience(4);
  // Rounds of 2 ms where everyone comes within a few milliseconds of the others: nobody is late.
  const std::vector<std::int64_t> even{kSelf, 1 * ms, 2 * ms, 6 * ms};
  for (int i = 0; i < 20; ++i) patience.round_timed(even, 6 * ms);
  CHECK_FALSE(patience.any_late());
  CHECK(patience.held_share(3) == 0.0);  // 4 ms after the others is within the slack
  // One round where peer 3 comes 25 ms after the others: it held up 20 ms of the recent rounds' ~70.
  patience.round_timed(std::vector<std::int64_t>{kSelf, 1 * ms, 2 * ms, 27 * ms}, 27 * ms);
  CHECK(patience.late_peers()[3] == 1);
  CHECK(patience.late_peers()[1] + patience.late_peers()[2] == 0);
  CHECK(patience.late_peers()[0] == 0);  // never timed: never late
  CHECK_FALSE(patience.any_silent());    // late is not silent: its parts came
  // It keeps up again: waited for fully once its hold-up is a small share of the recent time.
  int rounds = 0;
  while (patience.any_late() && rounds < 100) {
    patience.round_timed(even, 6 * ms);
    ++rounds;
  }
  CHECK(rounds > 1);
  CHECK(rounds < 20);
}

TEST_CASE("a peer stopped for 20 ms of every 30 is late, and stays late through the short runs in which it keeps up") {
  PeerPatience patience(4);
  const std::vector<std::int64_t> on_time{kSelf, 1 * ms, 1 * ms, 2 * ms};
  for (int i = 0; i < 5; ++i) patience.round_timed(on_time, 2 * ms);
  // Each period: one round waits 20 ms for it (it is not late yet), then five go at the others' pace.
  patience.round_timed(std::vector<std::int64_t>{kSelf, 1 * ms, 1 * ms, 21 * ms}, 21 * ms);
  CHECK(patience.late_peers()[3] == 1);
  for (int period = 0; period < 5; ++period) {
    // Stopped: rounds complete after their probe without it, each a whole round of hold-up.
    for (int i = 0; i < 7; ++i) patience.round_timed(std::vector<std::int64_t>{kSelf, 1 * ms, 1 * ms, kUnheard}, 2 * ms);
    for (int i = 0; i < 5; ++i) patience.round_timed(on_time, 2 * ms);
    CHECK(patience.late_peers()[3] == 1);
  }
}

TEST_CASE("a process descheduled for a few milliseconds now and then is not late; one round alone judges nobody") {
  PeerPatience patience(4);
  patience.round_timed(std::vector<std::int64_t>{kSelf, 1 * ms, 2 * ms, 40 * ms}, 40 * ms);
  CHECK_FALSE(patience.any_late());  // a line's first round: no history yet
  for (int i = 0; i < 200; ++i) {
    const std::int64_t hiccup = i % 10 == 0 ? 8 * ms : 1 * ms;  // one round in ten, 8 ms behind
    patience.round_timed(std::vector<std::int64_t>{kSelf, 1 * ms, 2 * ms, 2 * ms + hiccup}, 2 * ms + hiccup);
    CHECK_FALSE(patience.any_late());
  }
}

TEST_CASE("on a slow link every peer takes long and nobody is late, whatever the round's length") {
  PeerPatience patience(4);
  // Rounds of 6 s whose peers finish within a second of each other.
  const std::vector<std::int64_t> slow_link{kSelf, 6'000 * ms, 6'500 * ms, 7'000 * ms};
  for (int i = 0; i < 20; ++i) patience.round_timed(slow_link, 7'000 * ms);
  CHECK_FALSE(patience.any_late());
}

TEST_CASE("a line of two is not timed: the one peer has nobody to be late against") {
  PeerPatience patience(2);
  for (int i = 0; i < 5; ++i) patience.round_timed(std::vector<std::int64_t>{kSelf, 5'000 * ms}, 5'000 * ms);
  CHECK_FALSE(patience.any_late());
  // The LineMaster times every peer (each reports): there the later of two can be late.
  PeerPatience master(2);
  for (int i = 0; i < 4; ++i) master.round_timed(std::vector<std::int64_t>{1 * ms, 2 * ms}, 2 * ms);
  master.round_timed(std::vector<std::int64_t>{1 * ms, 50 * ms}, 50 * ms);
  CHECK(master.late_peers()[1] == 1);
  CHECK(master.late_peers()[0] == 0);
}

TEST_CASE("silent peers count as late; the LineMaster skips a round's unheard peers only where all are late") {
  PeerPatience patience(4);
  const std::vector<std::uint8_t> without_3{1, 1, 1, 0}, without_2_3{1, 1, 0, 0};
  patience.round_done(without_3);
  patience.round_done(without_3);
  CHECK(patience.late_peers()[3] == 1);  // silent
  CHECK(patience.only_late_unheard(without_3));
  CHECK_FALSE(patience.only_late_unheard(without_2_3));
  patience.heard(3);
  CHECK_FALSE(patience.any_late());
  CHECK_FALSE(patience.only_late_unheard(without_3));
}

TEST_CASE("the probe is the late share of the round's time so far, at least a timer's millisecond") {
  CHECK(PeerPatience::probe_us(0) == PeerPatience::kShortestProbeUs);
  CHECK(PeerPatience::probe_us(2 * ms) == PeerPatience::kShortestProbeUs);
  CHECK(PeerPatience::probe_us(10 * ms) == 3 * ms);
  CHECK(PeerPatience::probe_us(6'000 * ms) == 1'800 * ms);
  CHECK(PeerPatience::probe_us(-5) == PeerPatience::kShortestProbeUs);
}
