// The gate in front of CAF's port (actors/gate.hpp), in real time over loopback: what a stranger sends stops at
// the handshake, the node lives on and keeps its memory, and nodes that hold the token still join through it.
#include <doctest/doctest.h>

#include <caf/io/all.hpp>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "actors/gate.hpp"
#include "actors/node_handle.hpp"
#include "actors/token_proof.hpp"
#include "cluster_harness.hpp"
#include "dataplane/handshake.hpp"
#include "raw_connection.hpp"
#include "test_support.hpp"

namespace gridtrain::testing {
namespace {

// The bytes that killed a node through CAF 0.17.6's BASP parser: the 8-byte big-endian 2^40, 64 times.
std::vector<std::byte> caf_crash_bytes() {
  std::vector<std::byte> bytes;
  for (int i = 0; i < 64; ++i)
    for (int b = 7; b >= 0; --b) bytes.push_back(static_cast<std::byte>((std::uint64_t{1} << 40) >> (8 * b)));
  return bytes;
}

std::array<std::byte, dataplane::kHelloBytes> hello_bytes(std::uint32_t protocol) {
  std::array<std::byte, dataplane::kHelloBytes> out{};
  dataplane::encode(dataplane::Hello{protocol, 0, 0, 0, 1, dataplane::make_nonce()},
                    std::span<std::byte, dataplane::kHelloBytes>(out));
  return out;
}

// The node answers its grid view: it runs, and it is in its cluster.
bool answers(caf::actor_system& system, const actors::NodeHandle& node) {
  auto view = actors::query_grid_view(system, node.actor(), std::chrono::seconds(5));
  return view.ok() && !view.value().nodes.empty();
}

// The refusal in the challenge the gate answers `c` with (Refusal::none: the handshake goes on).
dataplane::Refusal challenge_refusal(const RawConnection& c) {
  const auto reply = c.receive(dataplane::kChallengeBytes);
  REQUIRE(reply.size() == dataplane::kChallengeBytes);
  const auto challenge =
      dataplane::decode_challenge(std::span<const std::byte, dataplane::kChallengeBytes>(reply.data(), reply.size()));
  REQUIRE(challenge.ok());
  return challenge.value().refusal;
}

}  // namespace

TEST_CASE("the gate turns away what a stranger sends before CAF sees a byte; the node lives on and lets members in") {
  TokenFile token("gate-test-secret");
  auto config = cluster_config(1, 1.0);
  config.cluster.token_file = token.path();
  actors::SystemConfig config_a{config}, config_b{config};
  caf::actor_system a{config_a}, b{config_b};
  EndNodesAtExit running;
  actors::NodeOptions first = node_options(config, 1, make_store(1000, 1.0f));
  actors::NodeHandle node = running.hold(start_welcomed(a, first));
  const actors::GateCounters& counts = *node.gate_counters();
  const std::uint16_t port = node.port();

  SUBCASE("bytes that are no handshake: CAF 0.17's crash, random bytes, a truncated hello") {
    const std::size_t before_kb = resident_kb();
    for (int i = 0; i < 100; ++i) RawConnection(port).send(caf_crash_bytes());
    std::mt19937 random(7);
    std::vector<std::byte> noise(4096);
    for (auto& x : noise) x = static_cast<std::byte>(random());
    noise[0] = std::byte{0};  // never the hello's magic by chance
    RawConnection(port).send(noise);
    {
      const auto hello = hello_bytes(dataplane::kControlProtocol);
      RawConnection(port).send(std::span<const std::byte>(hello).first(10));  // and then it closes
    }
    CHECK(eventually([&] { return counts.not_handshake == 101 && counts.timed_out == 1; }));
    CHECK(answers(a, node));
    CHECK(node.stats().gate.not_handshake == 101);  // what the Prometheus endpoint exports
    // 102 connections turned away cost the node no lasting memory (the gate reads fixed-size messages only).
    CHECK(resident_kb() < before_kb + 8 * 1024);
  }

  SUBCASE("idle connections from one address hold only its share of the gate; others, and members, still get in") {
    // A flood from 127.0.0.9: its first kGateMaxPendingPerAddress connections wait for a hello that never comes;
    // each one more is answered busy at once.
    std::vector<std::unique_ptr<RawConnection>> flood;
    for (std::size_t i = 0; i < actors::kGateMaxPendingPerAddress; ++i)
      flood.push_back(std::make_unique<RawConnection>(port, "127.0.0.9"));
    for (int i = 0; i < 3; ++i) {
      RawConnection extra(port, "127.0.0.9");
      CHECK(challenge_refusal(extra) == dataplane::Refusal::busy);
    }
    CHECK(eventually([&] { return counts.busy_address == 3; }));
    // Another address gets the handshake, and a node with the token joins through the gate meanwhile.
    RawConnection other(port, "127.0.0.1");
    other.send(hello_bytes(dataplane::kControlProtocol));
    CHECK(challenge_refusal(other) == dataplane::Refusal::none);
    actors::NodeOptions second = joiner_options(first, 2, make_store(1000, 3.0f), {port});
    auto joined = running.hold(start_welcomed(b, second));
    CHECK(answers(a, node));
    // The idle ones are closed once the gate's handshake time is over (kGateAcceptTimeout, not 5 s).
    CHECK(eventually([&] { return counts.timed_out >= actors::kGateMaxPendingPerAddress; }));
    joined.stop();
    joined.wait();
  }

  SUBCASE("a handshake of another channel is refused as another protocol") {
    RawConnection c(port);
    c.send(hello_bytes(dataplane::kDataProtocol));
    CHECK(challenge_refusal(c) == dataplane::Refusal::protocol);
    CHECK(eventually([&] { return counts.wrong_protocol == 1; }));
    CHECK(answers(a, node));
  }

  SUBCASE("a dialer that cannot prove the token gets a refusal, and CAF never sees it") {
    RawConnection c(port);
    c.send(hello_bytes(dataplane::kControlProtocol));
    const auto reply = c.receive(dataplane::kChallengeBytes);
    REQUIRE(reply.size() == dataplane::kChallengeBytes);
    std::array<std::byte, dataplane::kProofBytes> proof{};
    dataplane::encode(dataplane::Proof{}, std::span<std::byte, dataplane::kProofBytes>(proof));  // MAC all zero
    c.send(proof);
    c.send(caf_crash_bytes());  // whatever follows a failed proof is never read
    const auto verdict_bytes = c.receive(dataplane::kVerdictBytes);
    REQUIRE(verdict_bytes.size() == dataplane::kVerdictBytes);
    const auto verdict = dataplane::decode_verdict(
        std::span<const std::byte, dataplane::kVerdictBytes>(verdict_bytes.data(), verdict_bytes.size()));
    REQUIRE(verdict.ok());
    CHECK(verdict.value().refusal == dataplane::Refusal::bad_proof);
    CHECK(eventually([&] { return counts.bad_proof == 1; }));
    CHECK(answers(a, node));
  }

  SUBCASE("a node with a wrong token is rejected at the gate, and says so; one with the right token joins") {
    TokenFile wrong("another-secret");
    actors::NodeOptions intruder = joiner_options(first, 3, make_store(1000, 9.0f), {port});
    intruder.config.cluster.token_file = wrong.path();
    auto refused = running.hold(actors::start_node(b, intruder));
    REQUIRE(refused.ok());
    const auto outcome = refused.value().wait_joined();
    CHECK(outcome.result == actors::JoinResult::rejected);
    CHECK(outcome.reason.find("wrong cluster token") != std::string::npos);
    CHECK(eventually([&] { return counts.bad_proof == 1; }));
    CHECK(read(*intruder.store) == read(*make_store(1000, 9.0f)));  // nothing averaged into it

    actors::NodeOptions second = joiner_options(first, 2, make_store(1000, 3.0f), {port});
    auto joined = running.hold(start_welcomed(b, second));
    // With α = 1 both hold the mean after the first round.
    const auto mean = read(*make_store(1000, 2.0f));
    CHECK(eventually([&] { return read(*first.store) == mean && read(*second.store) == mean; }));
    CHECK(counts.accepted >= 1);
    joined.stop();
    joined.wait();
  }

  node.stop();
  node.wait();
}

TEST_CASE("an actor system shuts down while a dial is under way for an actor that has ended") {
  // A detached actor (as a GridMaster is) asks the gate to connect to a port that takes the TCP connection and never
  // answers the handshake, and ends. The actor system then shuts down with the dial under way: it must end.
  const auto [silent, port] = bind_loopback();
  REQUIRE(::listen(silent, 8) == 0);

  auto ended = std::make_shared<std::promise<void>>();
  auto done = ended->get_future();
  std::thread([ended, port] {
    actors::SystemConfig config{cluster_config(1, 1.0)};
    caf::actor_system system{config};
    const actors::Credentials credentials{"secret", nullptr};
    auto asked = std::make_shared<std::promise<void>>();
    auto asked_future = asked->get_future();
    // (A dummy argument: CAF 0.17 spawns a lambda without arguments through a null pointer, which UBSan reports.)
    system.spawn<caf::detached>([credentials, port, asked](caf::event_based_actor* self, int) {
      self->request(actors::gate_middleman(self->system(), credentials), std::chrono::seconds(30),
                    caf::connect_atom::value, std::string("127.0.0.1"), port)
          .then([](caf::node_id&, caf::strong_actor_ptr&, std::set<std::string>&) {}, [](caf::error&) {});
      self->delayed_send(self, std::chrono::milliseconds(200), caf::close_atom::value);
      asked->set_value();
      return caf::behavior{[self](caf::close_atom) { self->quit(); }};
    }, 0);
    asked_future.wait();
    std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the actor has ended; the dial goes on
    ended->set_value_at_thread_exit();
  }).detach();
  const bool shut_down = done.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  ::close(silent);
  if (!shut_down) {
    // The system's threads cannot be joined: say so and end the test binary, rather than hang it.
    MESSAGE("the actor system did not shut down within 60 s (a terminated actor held by a pending dial)");
    std::fflush(nullptr);
    std::_Exit(1);
  }
  CHECK(shut_down);
}

}  // namespace gridtrain::testing
