// The actor system configuration, and the measurement behind enable-automatic-connections.
#include <doctest/doctest.h>

#include <caf/io/all.hpp>

#include <chrono>
#include <memory>

#include "actors/system_config.hpp"
#include "cluster_harness.hpp"

namespace gridtrain::testing {
namespace {

using ping_atom = caf::atom_constant<caf::atom("ping")>;
using hand_atom = caf::atom_constant<caf::atom("hand")>;

}  // namespace

TEST_CASE("the middleman heartbeat and connection timeout come from the cluster config") {
  auto config = cluster_config(2, 1.0);
  config.cluster.heartbeat_ms = 150;
  config.cluster.connection_timeout_ms = 900;
  actors::SystemConfig cfg{config};
  CHECK(caf::get_or(cfg, "middleman.heartbeat-interval", caf::timespan{0}) ==
        caf::timespan{std::chrono::milliseconds(150)});
  CHECK(caf::get_or(cfg, "middleman.connection-timeout", caf::timespan{0}) ==
        caf::timespan{std::chrono::milliseconds(900)});
  CHECK(caf::get_or(cfg, "middleman.enable-automatic-connections", false));
}

TEST_CASE("two nodes that learned of each other through a third talk directly, not through it") {
  // A hands B a handle to C's actor, as the GridMaster hands workers their line peers. B must reach C on its own
  // connection: B's messages to C still arrive after A is gone.
  const auto config = cluster_config(2, 1.0);
  auto a_config = std::make_unique<actors::SystemConfig>(config);
  auto a = std::make_unique<caf::actor_system>(*a_config);
  actors::SystemConfig b_config{config}, c_config{config};
  caf::actor_system b{b_config}, c{c_config};

  caf::actor hub = a->spawn([](caf::event_based_actor*) -> caf::behavior {
    auto held = std::make_shared<caf::actor>();
    return {[held](hand_atom, caf::actor& x) { *held = std::move(x); }, [held](hand_atom) { return *held; }};
  });
  const auto hub_port = a->middleman().publish(hub, 0, "127.0.0.1");
  REQUIRE(hub_port);
  caf::actor echo = c.spawn([](caf::event_based_actor*) -> caf::behavior {
    return {[](ping_atom, int x) { return x + 1; }};
  });
  REQUIRE(c.middleman().publish(echo, 0, "127.0.0.1"));  // every node listens, as gridnode does
  {
    auto hub_at_c = c.middleman().remote_actor("127.0.0.1", *hub_port);
    REQUIRE(hub_at_c);
    caf::scoped_actor at_c{c};
    at_c->request(*hub_at_c, std::chrono::seconds(30), hand_atom::value, echo).receive([] {}, [](caf::error&) {});
  }
  caf::scoped_actor at_b{b};
  caf::actor echo_at_b;
  {
    auto hub_at_b = b.middleman().remote_actor("127.0.0.1", *hub_port);
    REQUIRE(hub_at_b);
    at_b->request(*hub_at_b, std::chrono::seconds(30), hand_atom::value)
        .receive([&](caf::actor& x) { echo_at_b = x; }, [](caf::error&) {});
  }
  REQUIRE(echo_at_b);
  auto ping = [&] {
    int reply = 0;
    at_b->request(echo_at_b, std::chrono::seconds(10), ping_atom::value, 41)
        .receive([&](int x) { reply = x; }, [](caf::error&) {});
    return reply;
  };
  CHECK(ping() == 42);
  // The direct connection is set up in the background; once there, A can go.
  CHECK(eventually([&] {
    bool direct = false;
    at_b->request(b.middleman().actor_handle(), std::chrono::seconds(10), caf::get_atom::value, echo_at_b.node())
        .receive([&](caf::node_id&, std::string& host, std::uint16_t port) { direct = !host.empty() && port != 0; },
                 [](caf::error&) {});
    return direct;
  }));
  caf::anon_send_exit(hub, caf::exit_reason::kill);
  hub = nullptr;
  a.reset();
  a_config.reset();
  CHECK(ping() == 42);
  caf::anon_send_exit(echo, caf::exit_reason::kill);
}

}  // namespace gridtrain::testing
