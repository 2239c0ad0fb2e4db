// What a hostile peer can send a running node, in real time over loopback: random bytes to its data port, and,
// holding the cluster token (an insider, or a stolen token), a truncated frame, a frame declaring 2^31 floats, a
// frame that is no frame, frames of an older layout version or from a node outside the line, and Joins for
// another model or protocol. The node keeps running and averaging, its memory stays flat, its model is not
// changed, and each drop is counted where /metrics reads it (NodeStats).
#include <doctest/doctest.h>

#include <caf/io/all.hpp>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "actors/gate.hpp"
#include "actors/node_handle.hpp"
#include "actors/token_proof.hpp"
#include "cluster_harness.hpp"
#include "dataplane/frame.hpp"
#include "dataplane/handshake.hpp"
#include "raw_connection.hpp"
#include "test_support.hpp"

namespace gridtrain::testing {
namespace {

constexpr const char* kToken = "hostile-peer-test";
constexpr std::uint64_t kIntruder = 77;  // the node id the intruder claims: in no line

// The next N bytes of `c`, all of them.
template <std::size_t N>
std::array<std::byte, N> exactly(const RawConnection& c) {
  const auto bytes = c.receive(N);
  REQUIRE(bytes.size() == N);
  std::array<std::byte, N> out{};
  std::copy(bytes.begin(), bytes.end(), out.begin());
  return out;
}

// A data-plane connection to node `to` that passed the handshake as node kIntruder, with the cluster token.
std::unique_ptr<RawConnection> intruder_link(std::uint16_t port, std::uint64_t to) {
  const dataplane::MacFunction mac = [](std::span<const std::byte> m) { return actors::token_mac(kToken, m); };
  auto s = std::make_unique<RawConnection>(port);
  const dataplane::Hello hello{dataplane::kDataProtocol, kIntruder, to, 0, 1, dataplane::make_nonce()};
  std::array<std::byte, dataplane::kHelloBytes> hello_bytes{};
  dataplane::encode(hello, hello_bytes);
  s->send(hello_bytes);
  const auto challenge = dataplane::decode_challenge(exactly<dataplane::kChallengeBytes>(*s));
  REQUIRE(challenge.ok());
  REQUIRE(challenge.value().refusal == dataplane::Refusal::none);
  std::array<std::byte, dataplane::kProofBytes> proof{};
  dataplane::encode(dataplane::Proof{dataplane::dialer_mac(mac, challenge.value().nonce, kIntruder, to)}, proof);
  s->send(proof);
  const auto verdict = dataplane::decode_verdict(exactly<dataplane::kVerdictBytes>(*s));
  REQUIRE(verdict.ok());
  REQUIRE(verdict.value().refusal == dataplane::Refusal::none);
  return s;
}

std::array<std::byte, dataplane::kFrameHeaderBytes> header_bytes(const dataplane::FrameHeader& h) {
  std::array<std::byte, dataplane::kFrameHeaderBytes> out{};
  dataplane::encode(h, out);
  return out;
}

// A frame of the line of `dim` (its version in `dims`), from index 1, of `floats` floats of 1e6 at offset 0.
std::vector<std::byte> frame(const actors::DimensionStats& line, std::uint64_t epoch, std::uint64_t version,
                             std::uint32_t floats) {
  dataplane::FrameHeader h;
  h.key = {.epoch = epoch, .layout_version = version, .dim = 0, .line = line.line, .round = 1};
  h.from = 1;
  h.length = floats;
  const auto head = header_bytes(h);
  std::vector<std::byte> out(head.begin(), head.end());
  const std::vector<float> payload(floats, 1e6f);
  const auto* bytes = reinterpret_cast<const std::byte*>(payload.data());
  out.insert(out.end(), bytes, bytes + payload.size() * sizeof(float));
  return out;
}

// The port of a host:port address.
std::uint16_t port_of(const std::string& address) {
  return static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
}

// Sends `join` to `node` from a fresh actor of `system`, answers its challenge with the cluster token, and returns
// the GridMaster's answer: the Reject's reason, or "welcomed".
std::string join_as_intruder(caf::actor_system& system, const caf::actor& node, actors::Join join) {
  caf::scoped_actor self{system};
  join.node = caf::actor_cast<caf::actor>(self);
  join.dimension_nodes = join.line_masters = std::vector<caf::actor>(actors::kDimsOffered, join.node);
  self->send(node, join);
  std::string answer;
  bool done = false;
  while (!done)
    self->receive(
        [&](const actors::JoinChallenge& c) {
          join.nonce = c.nonce;
          join.token_proof = actors::token_proof(kToken, join.node_id, c.nonce);
          self->send(caf::actor_cast<caf::actor>(self->current_sender()), join);
        },
        [&](const actors::Reject& r) {
          answer = r.reason;
          done = true;
        },
        [&](const actors::Welcome&) {
          answer = "welcomed";
          done = true;
        },
        caf::after(std::chrono::seconds(10)) >> [&] {
          answer = "no answer";
          done = true;
        });
  return answer;
}

std::uint64_t rounds(const actors::NodeHandle& node) { return node.stats().total().rounds_done; }

}  // namespace

TEST_CASE("a hostile peer's bytes, frames and joins are dropped and counted; the node runs on, its model and memory "
          "unchanged") {
  TokenFile token(kToken);
  auto config = cluster_config(1, 1.0, 256);
  config.cluster.token_file = token.path();
  actors::SystemConfig config_a{config}, config_b{config};
  caf::actor_system a{config_a}, b{config_b};
  EndNodesAtExit running;
  auto data_plane = actors::start_data_plane(config, true);
  REQUIRE(data_plane.ok());
  actors::NodeOptions first = node_options(config, 1, make_store(1000, 2.0f));
  first.data_plane = data_plane.value();
  actors::NodeHandle node = running.hold(start_welcomed(a, first));
  // The same values: averaging keeps them, an injected chunk would not.
  actors::NodeOptions second = joiner_options(first, 2, make_store(1000, 2.0f), {node.port()});
  second.data_plane = nullptr;
  actors::NodeHandle peer = running.hold(start_welcomed(b, second));
  REQUIRE(eventually([&] { return rounds(node) > 10 && node.stats().dims[0].peers == 2; }));
  const actors::DimensionStats line = node.stats().dims[0];
  const auto view = actors::query_grid_view(a, node.actor());
  REQUIRE(view.ok());
  const std::uint64_t epoch = view.value().epoch;  // a bootstrap's: the wall clock's milliseconds
  const std::vector<float> model = read(*first.store);
  const std::uint16_t data_port = port_of(data_plane.value()->address());
  const std::size_t before_kb = resident_kb();

  // Random bytes to the data port: a stranger.
  std::mt19937 random(11);
  std::vector<std::byte> noise(4096);
  for (auto& x : noise) x = static_cast<std::byte>(random());
  noise[0] = std::byte{0};  // never the hello's magic by chance
  RawConnection(data_port).send(noise);

  // With the token: a truncated frame header, then the connection ends.
  intruder_link(data_port, 1)->send(std::span(header_bytes({}).data(), 30));
  // A frame declaring 2^31 floats for our line: refused before a byte of its payload is read or allocated.
  {
    dataplane::FrameHeader huge;
    huge.key = {.epoch = epoch, .layout_version = line.layout_version, .dim = 0, .line = line.line, .round = 1};
    huge.from = 1;
    huge.length = std::uint32_t{1} << 31;
    auto s = intruder_link(data_port, 1);
    s->send(header_bytes(huge));
    s->send(noise);  // the start of its "payload"
  }
  // 64 bytes that are no frame header.
  intruder_link(data_port, 1)->send(std::span(noise).first(dataplane::kFrameHeaderBytes));
  // Well-formed frames: of an older layout version (stale), and of ours from a node outside the line (malformed).
  {
    auto s = intruder_link(data_port, 1);
    s->send(frame(line, epoch, line.layout_version - 1, 64));
    s->send(frame(line, epoch, line.layout_version, 64));
  }
  // Joins with the token for another model and another protocol, through the gate.
  caf::scoped_actor dialer{b};
  auto seed = dialer->request(actors::gate_middleman(b, {token_in(token.path()), nullptr}),
                                    std::chrono::seconds(10), caf::connect_atom::value, std::string("127.0.0.1"),
                                    node.port());
  caf::actor seed_node;
  seed.receive(
      [&](caf::node_id&, caf::strong_actor_ptr& p, std::set<std::string>&) {
        seed_node = caf::actor_cast<caf::actor>(p);
      },
      [&](caf::error& e) { FAIL("cannot reach the node: " << b.render(e)); });
  actors::Join other_model;
  other_model.node_id = kIntruder;
  other_model.address = "127.0.0.1:1";
  other_model.model_signature = first.store->signature() ^ 1;
  other_model.model_floats = 1000;
  other_model.protocol = actors::protocol_version;
  CHECK(join_as_intruder(b, seed_node, other_model).find("different model") != std::string::npos);
  actors::Join other_protocol = other_model;
  other_protocol.model_signature = first.store->signature();
  other_protocol.protocol = actors::protocol_version + 1;
  CHECK(join_as_intruder(b, seed_node, other_protocol).find("protocol") != std::string::npos);

  // Each drop is counted where /metrics reads it.
  CHECK(eventually([&] {
    const actors::NodeStats s = node.stats();
    return s.data_plane.strangers >= 1 && s.data_plane.truncated == 1 && s.data_plane.oversized == 1 &&
           s.data_plane.bad_frames == 1 && s.dims[0].rounds.stale_dropped >= 1 && s.bad_messages >= 1 &&
           s.joins.rejected == 2;
  }));
  const actors::NodeStats s = node.stats();
  INFO("strangers " << s.data_plane.strangers << ", truncated " << s.data_plane.truncated << ", oversized "
                    << s.data_plane.oversized << ", bad frames " << s.data_plane.bad_frames << ", stale "
                    << s.dims[0].rounds.stale_dropped << ", malformed " << s.bad_messages << ", joins rejected "
                    << s.joins.rejected);
  CHECK(s.data_plane.handshakes == 0);  // the intruder held the token

  // The node runs on: it answers, its line still averages, and its model is what averaging keeps.
  const std::uint64_t rounds_after = rounds(node);
  CHECK(eventually([&] { return rounds(node) > rounds_after + 10; }));
  CHECK(node.grid_view().ok());
  CHECK(node.grid_view().value().nodes.size() == 2);
  CHECK(read(*first.store) == model);
  CHECK(read(*second.store) == model);
  CHECK(resident_kb() < before_kb + 8 * 1024);
  peer.stop();
  peer.wait();
  node.stop();
  node.wait();
}

}  // namespace gridtrain::testing
