// The data-plane handshake's messages and proofs.
#include <doctest/doctest.h>

#include <array>
#include <numeric>

#include "dataplane/handshake.hpp"
#include "tests/dataplane/keyed_mac.hpp"

using namespace gridtrain::dataplane;
using gridtrain::testing::keyed;

TEST_CASE("handshake messages round-trip, and each refuses another's bytes") {
  Hello hello{kDataProtocol, 11, 22, 5, 7, make_nonce()};
  std::array<std::byte, kHelloBytes> hb{};
  encode(hello, hb);
  REQUIRE(decode_hello(hb).ok());
  CHECK(decode_hello(hb).value() == hello);

  Challenge challenge{Refusal::unknown_node, make_nonce(), make_nonce()};
  std::array<std::byte, kChallengeBytes> cb{};
  encode(challenge, cb);
  REQUIRE(decode_challenge(cb).ok());
  CHECK(decode_challenge(cb).value() == challenge);

  Proof proof{make_nonce()};
  std::array<std::byte, kProofBytes> pb{};
  encode(proof, pb);
  CHECK(decode_proof(pb).value() == proof);

  std::array<std::byte, kVerdictBytes> vb{};
  encode(Verdict{Refusal::bad_proof}, vb);
  CHECK(decode_verdict(vb).value().refusal == Refusal::bad_proof);

  // The first bytes of a hello are no challenge, and an unknown refusal code is no verdict.
  std::array<std::byte, kChallengeBytes> wrong{};
  std::copy(hb.begin(), hb.end(), wrong.begin());
  CHECK_FALSE(decode_challenge(wrong).ok());
  vb[4] = std::byte{99};
  CHECK_FALSE(decode_verdict(vb).ok());
  CHECK(to_string(Refusal::bad_proof) == "wrong cluster token");
}

TEST_CASE("each side's proof binds the other's fresh nonce, both ids and its role") {
  const MacFunction mac = keyed(7);
  const Nonce a = make_nonce(), b = make_nonce();
  CHECK(a != b);  // fresh each time
  const Mac dialer = dialer_mac(mac, a, 1, 2);
  CHECK(equal_macs(dialer, dialer_mac(mac, a, 1, 2)));
  CHECK_FALSE(equal_macs(dialer, dialer_mac(mac, b, 1, 2)));        // another nonce: a replay proves nothing
  CHECK_FALSE(equal_macs(dialer, dialer_mac(mac, a, 1, 3)));        // another node
  CHECK_FALSE(equal_macs(dialer, acceptor_mac(mac, a, 1, 2)));      // the other role
  CHECK_FALSE(equal_macs(dialer, dialer_mac(keyed(8), a, 1, 2)));  // another token
}
