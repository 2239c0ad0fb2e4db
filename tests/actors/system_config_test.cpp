// The actor system configuration, and line peers in different processes talking over a direct connection.
#include <doctest/doctest.h>

#include <caf/io/all.hpp>

#include <chrono>

#include "actors/node_handle.hpp"
#include "actors/runtime.hpp"
#include "actors/system_config.hpp"
#include "base/thread_cpu.hpp"
#include "cluster_harness.hpp"

namespace gridtrain::testing {

TEST_CASE("the middleman heartbeat, connection timeout and scheduler come from the cluster config and SystemConfig") {
  auto config = cluster_config(2, 1.0);
  config.cluster.heartbeat_ms = 150;
  config.cluster.connection_timeout_ms = 900;
  actors::SystemConfig cfg{config};
  CHECK(caf::get_or(cfg, "middleman.heartbeat-interval", caf::timespan{0}) ==
        caf::timespan{std::chrono::milliseconds(150)});
  CHECK(caf::get_or(cfg, "middleman.connection-timeout", caf::timespan{0}) ==
        caf::timespan{std::chrono::milliseconds(900)});
  CHECK_FALSE(caf::get_or(cfg, "middleman.enable-automatic-connections", true));
  CHECK(caf::get_or(cfg, "scheduler.policy", caf::atom("")) == caf::atom("sharing"));
  CHECK(caf::get_or(cfg, "scheduler.max-threads", std::size_t{0}) == actors::SystemConfig::worker_threads);
}

TEST_CASE("the CPU time of the actors' threads counts in what averaging costs the process") {
  const auto config = cluster_config(1, 1.0);
  actors::Runtime runtime{config};
  CHECK_FALSE(runtime.averaging_cpu());  // no data plane yet: no rounds to pace
  REQUIRE(runtime.shared_data_plane(config, false).ok());
  const auto averaging_cpu = runtime.averaging_cpu();
  REQUIRE(averaging_cpu);
  // An actor that keeps a CAF thread busy for 60 ms of CPU time.
  const auto before = averaging_cpu();
  {
    caf::scoped_actor self{runtime.system()};
    // (An argument: CAF 0.17 spawns a function of none through a null pointer, which UBSan reports.)
    auto busy = runtime.system().spawn(
        [](std::chrono::milliseconds cpu) -> caf::behavior {
          return {[cpu](int) {
            const auto until = base::this_thread_cpu() + cpu;
            volatile int spin = 0;
            while (base::this_thread_cpu() < until) spin = spin + 1;
            return 0;
          }};
        },
        std::chrono::milliseconds(60));
    self->request(busy, caf::infinite, 1).receive([](int) {}, [](caf::error&) {});
    self->send_exit(busy, caf::exit_reason::user_shutdown);
  }
  CHECK(averaging_cpu() - before >= std::chrono::milliseconds(60));
  actors::Runtime::release_calling_thread();
}

TEST_CASE("line peers that learned of each other through the GridMaster talk over their own connection") {
  // Three actor systems, as three processes: A bootstraps (and hosts the GridMaster), B and C join through A.
  // In one line (dims 1), B and C must reach each other directly, not through A's node.
  const auto config = cluster_config(1, 1.0);
  actors::SystemConfig config_a{config}, config_b{config}, config_c{config};
  caf::actor_system a{config_a}, b{config_b}, c{config_c};
  EndNodesAtExit running;
  auto start = [&](caf::actor_system& system, std::uint64_t id, std::optional<config::HostPort> seed) {
    actors::NodeOptions o = node_options(config, id, make_store(100, static_cast<float>(id)));
    if (seed) o.seeds = {*seed};
    auto node = running.hold(actors::start_node(system, o));
    REQUIRE(node.ok());
    CHECK(node.value().wait_joined().result == actors::JoinResult::welcomed);
    return node.value();
  };
  const auto node_a = start(a, 1, std::nullopt);
  const config::HostPort seed{"127.0.0.1", node_a.port()};
  const auto node_b = start(b, 2, seed);
  const auto node_c = start(c, 3, seed);

  auto direct = [](caf::actor_system& from, const caf::actor& to) {
    caf::scoped_actor self{from};
    bool yes = false;
    self->request(from.middleman().actor_handle(), std::chrono::seconds(10), caf::get_atom::value, to.node())
        .receive([&](caf::node_id&, std::string& host, std::uint16_t port) { yes = !host.empty() && port != 0; },
                 [](caf::error&) {});
    return yes;
  };
  CHECK(eventually([&] { return direct(b, node_c.actor()) && direct(c, node_b.actor()); }));
  // And rounds run among the three: with α = 1 they all hold one value after the first round of the line of
  // three (not necessarily the starting mean: a round of the line of two may have completed at one peer and
  // been dropped by the other when the third joined).
  CHECK(eventually([&] {
    const auto v = read(*node_a.store());
    return v == read(*node_b.store()) && v == read(*node_c.store()) && node_a.stats().dims[0].rounds.rounds_done > 0;
  }));
  for (const auto& n : {node_c, node_b, node_a}) {
    n.stop();
    n.wait();
  }
}

}  // namespace gridtrain::testing
