// PeerPatience (allreduce/peer_patience.hpp): a peer unheard for two rounds in a row is silent until it is heard.
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

TEST_CASE("what is missing need not be waited for only where every peer not heard is silent") {
  PeerPatience patience(4);
  const std::vector<std::uint8_t> without_3{1, 1, 1, 0}, without_2_3{1, 1, 0, 0};
  CHECK_FALSE(patience.only_silent_unheard(without_3));  // nobody silent yet
  patience.round_done(without_3);
  patience.round_done(without_3);
  CHECK(patience.only_silent_unheard(without_3));
  CHECK_FALSE(patience.only_silent_unheard(without_2_3));  // peer 2 is missing and not silent
  CHECK(patience.only_silent_unheard(std::vector<std::uint8_t>{1, 1, 1, 1}));  // nothing missing
}
