#pragma once
// How two nodes open a data-plane connection: each proves to the other that it holds the cluster token, without
// sending it, and names the node it is and the node it wants (one process may host many nodes).
//
//   dialer -> acceptor  Hello      magic "GTDH", protocol, from node, to node, stream k of n, nonce_d (32 bytes)
//   acceptor -> dialer  Challenge  magic "GTDC", refusal (0: none), nonce_a, mac_a = MAC("acceptor", nonce_d, ids)
//   dialer -> acceptor  Proof      magic "GTDP", mac_d = MAC("dialer", nonce_a, ids)
//   acceptor -> dialer  Verdict    magic "GTDV", refusal (0: accepted)
//
// MAC is HMAC-SHA-256 keyed by the cluster token (the caller supplies it: this library never sees the token).
// Each side's MAC covers the other side's fresh nonce, so a recorded handshake proves nothing the next time, and
// the acceptor proves itself too. A refusal says why, as a code; the connection closes after it.
// Every message has a fixed size, so a reader knows how much to read before it looks at anything.
//
// The control plane's gate (actors/gate.hpp) runs the same handshake before a connection reaches CAF, as channel
// `control`: its protocol number and its MACs' labels differ, so a proof made for one channel proves nothing on
// the other, and a dialer of the wrong kind is refused as another protocol.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "base/result.hpp"

namespace gridtrain::dataplane {

// 2: the owner of a chunk answers a peer whose contribution it counted with a delta (frame kind 3), which a node of
// protocol 1 would take for a mean; so the two are refused to each other as another protocol version.
// 3: a dialer may open several connections to one peer (Hello::stream of Hello::streams), which a node of protocol
// 2 would each take for the one connection, closing the one before.
inline constexpr std::uint32_t kDataProtocol = 3;
// The most connections one node opens to one peer (ServiceOptions::streams).
inline constexpr std::uint16_t kMaxStreams = 16;
inline constexpr std::uint32_t kControlProtocol = 0x1001;  // the gate in front of CAF's port
// Set in a Hello's protocol when the dialer will start TLS (dataplane/tls.hpp) once the handshake is through. Each
// side enforces its own setting: an acceptor with TLS refuses a dialer without (and the reverse) as tls_mismatch,
// so a dialer learns which setting differs, and no one can be talked out of TLS.
inline constexpr std::uint32_t kTlsFlag = 0x8000'0000u;

// Which connection a handshake opens: it is in every MAC.
enum class Channel : std::uint8_t { data, control };

using Nonce = std::array<std::byte, 32>;
using Mac = std::array<std::byte, 32>;
// HMAC-SHA-256 of `message` under the cluster token.
using MacFunction = std::function<Mac(std::span<const std::byte> message)>;

enum class Refusal : std::uint32_t {
  none = 0,
  protocol = 1,      // another protocol (the other channel) or protocol version
  unknown_node = 2,  // the node asked for does not live in this process (any more)
  bad_proof = 3,     // the dialer's MAC is wrong: it does not hold the cluster token
  tls_mismatch = 4,  // one side runs TLS after the handshake and the other does not
  busy = 5,          // too many handshakes under way, from the dialer's address or in all: try again shortly
};
std::string to_string(Refusal refusal);

struct Hello {
  std::uint32_t protocol = kDataProtocol;
  std::uint64_t from_node = 0;
  std::uint64_t to_node = 0;
  // This connection is the dialer's stream-th of `streams` to the node (the control channel opens one). An acceptor
  // checks 0 <= stream < streams <= kMaxStreams.
  std::uint16_t stream = 0;
  std::uint16_t streams = 1;
  Nonce nonce{};
  friend bool operator==(const Hello&, const Hello&) = default;
};
inline constexpr std::size_t kHelloBytes = 64;

struct Challenge {
  Refusal refusal = Refusal::none;
  Nonce nonce{};
  Mac mac{};
  friend bool operator==(const Challenge&, const Challenge&) = default;
};
inline constexpr std::size_t kChallengeBytes = 72;

struct Proof {
  Mac mac{};
  friend bool operator==(const Proof&, const Proof&) = default;
};
inline constexpr std::size_t kProofBytes = 40;

struct Verdict {
  Refusal refusal = Refusal::none;
  friend bool operator==(const Verdict&, const Verdict&) = default;
};
inline constexpr std::size_t kVerdictBytes = 8;

void encode(const Hello& m, std::span<std::byte, kHelloBytes> out);
void encode(const Challenge& m, std::span<std::byte, kChallengeBytes> out);
void encode(const Proof& m, std::span<std::byte, kProofBytes> out);
void encode(const Verdict& m, std::span<std::byte, kVerdictBytes> out);
// Each checks its magic and that its refusal code is one it knows; anything else is an error that says so.
Result<Hello> decode_hello(std::span<const std::byte, kHelloBytes> in);
Result<Challenge> decode_challenge(std::span<const std::byte, kChallengeBytes> in);
Result<Proof> decode_proof(std::span<const std::byte, kProofBytes> in);
Result<Verdict> decode_verdict(std::span<const std::byte, kVerdictBytes> in);

// What each side MACs: the channel and role, the other side's nonce, and both node ids.
Mac acceptor_mac(const MacFunction& mac, const Nonce& dialer_nonce, std::uint64_t from_node, std::uint64_t to_node,
                 Channel channel = Channel::data);
Mac dialer_mac(const MacFunction& mac, const Nonce& acceptor_nonce, std::uint64_t from_node, std::uint64_t to_node,
               Channel channel = Channel::data);

// A fresh random nonce.
Nonce make_nonce();

// Answers a connection the port has no room for with a Challenge that refuses it as busy (Refusal::busy), written
// at once into the fresh socket's empty buffer, never waiting; then the caller closes it. What the dialer sent so
// far (its hello) is read and dropped first, so that the close is an orderly end, not a reset that could overtake
// the answer. A dialer that reads the answer knows to try again later (a gate error of its own, a redial).
void answer_busy(int fd);

// Compares in time that does not depend on where they differ.
bool equal_macs(const Mac& a, const Mac& b);

}  // namespace gridtrain::dataplane
