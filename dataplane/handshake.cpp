#include "dataplane/handshake.hpp"

#include <sys/random.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>

#include <algorithm>
#include <string_view>
#include <vector>

#include "base/check.hpp"
#include "dataplane/wire.hpp"

namespace gridtrain::dataplane {

namespace {

constexpr std::uint32_t magic(const char (&text)[5]) {
  return static_cast<std::uint32_t>(static_cast<unsigned char>(text[0])) |
         static_cast<std::uint32_t>(static_cast<unsigned char>(text[1])) << 8 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(text[2])) << 16 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(text[3])) << 24;
}
constexpr std::uint32_t kHello = magic("GTDH");
constexpr std::uint32_t kChallenge = magic("GTDC");
constexpr std::uint32_t kProof = magic("GTDP");
constexpr std::uint32_t kVerdict = magic("GTDV");

void put_bytes(std::span<std::byte> out, std::size_t at, std::span<const std::byte> bytes) {
  std::copy(bytes.begin(), bytes.end(), out.begin() + static_cast<std::ptrdiff_t>(at));
}

template <std::size_t N>
std::array<std::byte, N> get_bytes(std::span<const std::byte> in, std::size_t at) {
  std::array<std::byte, N> out;
  std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(at), N, out.begin());
  return out;
}

Result<Refusal> refusal_at(std::span<const std::byte> in, std::size_t at, const char* what) {
  const auto code = wire::get<std::uint32_t>(in, at);
  if (code > static_cast<std::uint32_t>(Refusal::busy))
    return Error{.message = std::string(what) + " with unknown refusal code " + std::to_string(code)};
  return static_cast<Refusal>(code);
}

Mac role_mac(const MacFunction& mac, std::string_view role, const Nonce& nonce, std::uint64_t from,
             std::uint64_t to) {
  std::vector<std::byte> message(role.size() + nonce.size() + 16);
  std::transform(role.begin(), role.end(), message.begin(), [](char c) { return static_cast<std::byte>(c); });
  put_bytes(message, role.size(), nonce);
  wire::put<std::uint64_t>(message, role.size() + nonce.size(), from);
  wire::put<std::uint64_t>(message, role.size() + nonce.size() + 8, to);
  return mac(message);
}

}  // namespace

std::string to_string(Refusal refusal) {
  switch (refusal) {
    case Refusal::none: return "accepted";
    case Refusal::protocol: return "another protocol or protocol version";
    case Refusal::unknown_node: return "no such node in that process";
    case Refusal::bad_proof: return "wrong cluster token";
    case Refusal::tls_mismatch: return "one side uses TLS (cluster.tls_certificate) and the other does not";
    case Refusal::busy: return "busy: too many handshakes under way (from this address, or in all)";
  }
  return "unknown refusal";
}

void encode(const Hello& m, std::span<std::byte, kHelloBytes> out) {
  wire::put<std::uint32_t>(out, 0, kHello);
  wire::put<std::uint32_t>(out, 4, m.protocol);
  wire::put<std::uint64_t>(out, 8, m.from_node);
  wire::put<std::uint64_t>(out, 16, m.to_node);
  wire::put<std::uint16_t>(out, 24, m.stream);
  wire::put<std::uint16_t>(out, 26, m.streams);
  wire::put<std::uint32_t>(out, 28, 0);
  put_bytes(out, 32, m.nonce);
}

void encode(const Challenge& m, std::span<std::byte, kChallengeBytes> out) {
  wire::put<std::uint32_t>(out, 0, kChallenge);
  wire::put<std::uint32_t>(out, 4, static_cast<std::uint32_t>(m.refusal));
  put_bytes(out, 8, m.nonce);
  put_bytes(out, 40, m.mac);
}

void encode(const Proof& m, std::span<std::byte, kProofBytes> out) {
  wire::put<std::uint32_t>(out, 0, kProof);
  wire::put<std::uint32_t>(out, 4, 0);
  put_bytes(out, 8, m.mac);
}

void encode(const Verdict& m, std::span<std::byte, kVerdictBytes> out) {
  wire::put<std::uint32_t>(out, 0, kVerdict);
  wire::put<std::uint32_t>(out, 4, static_cast<std::uint32_t>(m.refusal));
}

Result<Hello> decode_hello(std::span<const std::byte, kHelloBytes> in) {
  if (wire::get<std::uint32_t>(in, 0) != kHello) return Error{.message = "not a data-plane hello (wrong magic)"};
  Hello m;
  m.protocol = wire::get<std::uint32_t>(in, 4);
  m.from_node = wire::get<std::uint64_t>(in, 8);
  m.to_node = wire::get<std::uint64_t>(in, 16);
  m.stream = wire::get<std::uint16_t>(in, 24);
  m.streams = wire::get<std::uint16_t>(in, 26);
  m.nonce = get_bytes<32>(in, 32);
  return m;
}

Result<Challenge> decode_challenge(std::span<const std::byte, kChallengeBytes> in) {
  if (wire::get<std::uint32_t>(in, 0) != kChallenge)
    return Error{.message = "not a data-plane challenge (wrong magic)"};
  auto refusal = refusal_at(in, 4, "challenge");
  if (!refusal) return refusal.error();
  return Challenge{refusal.value(), get_bytes<32>(in, 8), get_bytes<32>(in, 40)};
}

Result<Proof> decode_proof(std::span<const std::byte, kProofBytes> in) {
  if (wire::get<std::uint32_t>(in, 0) != kProof || wire::get<std::uint32_t>(in, 4) != 0)
    return Error{.message = "not a data-plane proof (wrong magic)"};
  return Proof{get_bytes<32>(in, 8)};
}

Result<Verdict> decode_verdict(std::span<const std::byte, kVerdictBytes> in) {
  if (wire::get<std::uint32_t>(in, 0) != kVerdict) return Error{.message = "not a data-plane verdict (wrong magic)"};
  auto refusal = refusal_at(in, 4, "verdict");
  if (!refusal) return refusal.error();
  return Verdict{refusal.value()};
}

Mac acceptor_mac(const MacFunction& mac, const Nonce& dialer_nonce, std::uint64_t from_node, std::uint64_t to_node,
                 Channel channel) {
  return role_mac(mac, channel == Channel::data ? "gridtrain-data/acceptor" : "gridtrain-control/acceptor",
                  dialer_nonce, from_node, to_node);
}

Mac dialer_mac(const MacFunction& mac, const Nonce& acceptor_nonce, std::uint64_t from_node, std::uint64_t to_node,
               Channel channel) {
  return role_mac(mac, channel == Channel::data ? "gridtrain-data/dialer" : "gridtrain-control/dialer",
                  acceptor_nonce, from_node, to_node);
}

Nonce make_nonce() {
  // The kernel's generator. (A thread_local std::random_device was 5 KB of static TLS in every thread.)
  Nonce nonce;
  std::size_t got = 0;
  while (got < nonce.size()) {
    const ssize_t n = ::getrandom(nonce.data() + got, nonce.size() - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
    else if (errno != EINTR)  // no entropy from the kernel: nothing here can be trusted
      precondition_violated("getrandom() failed: the kernel gives no random bytes for a handshake nonce");
  }
  return nonce;
}

bool equal_macs(const Mac& a, const Mac& b) {
  std::byte diff{0};
  for (std::size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == std::byte{0};
}

void answer_busy(int fd) {
  std::array<std::byte, kHelloBytes> hello{};
  while (::recv(fd, hello.data(), hello.size(), MSG_DONTWAIT) > 0) {
  }
  std::array<std::byte, kChallengeBytes> answer{};
  encode(Challenge{.refusal = Refusal::busy}, std::span<std::byte, kChallengeBytes>(answer));
  (void)::send(fd, answer.data(), answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
}

}  // namespace gridtrain::dataplane
