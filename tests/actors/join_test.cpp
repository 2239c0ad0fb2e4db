// Joining: who gets in, who is turned away and why, and joining over a real connection.
#include <doctest/doctest.h>

#include <caf/io/all.hpp>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "actors/messages.hpp"
#include "cluster_harness.hpp"

namespace gridtrain::testing {
namespace {

// A token file in a fresh temporary directory, removed with the object.
struct TokenFile {
  explicit TokenFile(const std::string& token) {
    static int counter = 0;
    dir = std::filesystem::temp_directory_path() /
          ("gridtrain-join-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "token") << token << "\n";
  }
  ~TokenFile() { std::filesystem::remove_all(dir); }
  std::string path() const { return (dir / "token").string(); }
  std::filesystem::path dir;
};

actors::NodeOptions joiner(const TestCluster& cluster, const actors::NodeHandle& seed, std::uint64_t id,
                           std::size_t floats) {
  actors::NodeOptions o;
  o.config = cluster.config();
  o.node_id = id;
  o.store = make_store(floats, 1.0f);
  o.listen = false;
  o.seed_node = seed.actor();
  return o;
}

}  // namespace

TEST_CASE("a node with a different model is rejected with a reason, and ends") {
  TestCluster cluster(cluster_config(2, 1.0));
  auto& first = cluster.add(1, make_store(64, 1.0f));
  auto other = actors::start_node(cluster.system(), joiner(cluster, first, 2, 65));
  REQUIRE(other.ok());
  const auto outcome = other.value().wait_joined();
  CHECK(outcome.result == actors::JoinResult::rejected);
  CHECK(outcome.reason.find("different model") != std::string::npos);
  CHECK(other.value().wait_for(std::chrono::seconds(60)));
  CHECK(cluster.status().nodes.size() == 1);
}

TEST_CASE("a node that cannot prove the cluster token is rejected; one that can is welcomed") {
  TokenFile right("alpha"), wrong("beta");
  auto config = cluster_config(2, 1.0);
  config.cluster.token_file = right.path();
  TestCluster cluster(config);
  auto& first = cluster.add(1, make_store(64, 1.0f));

  auto bad = joiner(cluster, first, 2, 64);
  bad.config.cluster.token_file = wrong.path();
  auto rejected = actors::start_node(cluster.system(), bad);
  REQUIRE(rejected.ok());
  const auto outcome = rejected.value().wait_joined();
  CHECK(outcome.result == actors::JoinResult::rejected);
  CHECK(outcome.reason.find("token") != std::string::npos);
  rejected.value().wait();

  auto none = joiner(cluster, first, 3, 64);
  none.config.cluster.token_file = "";
  auto rejected_too = actors::start_node(cluster.system(), none);
  REQUIRE(rejected_too.ok());
  CHECK(rejected_too.value().wait_joined().result == actors::JoinResult::rejected);
  rejected_too.value().wait();

  auto good = actors::start_node(cluster.system(), joiner(cluster, first, 4, 64));
  REQUIRE(good.ok());
  CHECK(good.value().wait_joined().result == actors::JoinResult::welcomed);
  CHECK(cluster.status().nodes.size() == 2);
  good.value().kill();
  good.value().wait();
}

TEST_CASE("a join with another protocol version, a duplicate id or missing handles is rejected with a reason") {
  TestCluster cluster(cluster_config(2, 1.0));
  auto& first = cluster.add(1, make_store(64, 1.0f));
  caf::scoped_actor self{cluster.system()};
  const caf::actor me = caf::actor_cast<caf::actor>(self);
  const auto& store = *first.store();
  auto join = [&](std::uint64_t id, std::uint32_t protocol, std::size_t handles) {
    return actors::Join{id, "test", store.signature(), store.size(), protocol, "", me,
                        std::vector<caf::actor>(handles, me), std::vector<caf::actor>(handles, me)};
  };
  auto reason_for = [&](const actors::Join& j) {
    std::string reason = "(no answer)";
    self->send(first.actor(), j);
    self->receive([&](actors::Reject& r) { reason = r.reason; },
                  [&](actors::Welcome&) { reason = "(welcomed)"; },
                  caf::after(std::chrono::seconds(30)) >> [] {});
    return reason;
  };
  CHECK(reason_for(join(7, actors::protocol_version + 1, actors::kDimsOffered)).find("protocol") != std::string::npos);
  CHECK(reason_for(join(1, actors::protocol_version, actors::kDimsOffered)).find("already") != std::string::npos);
  CHECK(reason_for(join(8, actors::protocol_version, 2)).find("malformed") != std::string::npos);
  CHECK(cluster.status().nodes.size() == 1);
}

TEST_CASE("garbage sent to a node is dropped and counted, and the cluster goes on") {
  TestCluster cluster(cluster_config(2, 1.0));
  auto& first = cluster.add(1, make_store(64, 1.0f));
  caf::anon_send(first.actor(), std::string("garbage"), 17);
  caf::anon_send(first.actor(), actors::Join{});  // no node handle to answer
  caf::anon_send(first.actor(), actors::ScatterChunk{});
  CHECK(eventually([&] { return first.stats().bad_messages >= 2; }));
  cluster.add(2, make_store(64, 2.0f));
  CHECK(cluster.status().nodes.size() == 2);
}

TEST_CASE("a seed that cannot be reached ends the join as unreachable") {
  auto config = cluster_config(2, 1.0);
  actors::SystemConfig system_config{config};
  caf::actor_system system{system_config};
  actors::NodeOptions o;
  o.config = config;
  o.store = make_store(8, 1.0f);
  o.listen = false;
  o.seed_address = config::Endpoint{"127.0.0.1", 1};  // nothing listens on port 1
  auto node = actors::start_node(system, o);
  REQUIRE(node.ok());
  const auto outcome = node.value().wait_joined();
  CHECK(outcome.result == actors::JoinResult::unreachable);
  CHECK(outcome.reason.find("127.0.0.1:1") != std::string::npos);
  node.value().wait();
}

TEST_CASE("nodes in two actor systems join over TCP, show in status, and average their parameters") {
  auto config = cluster_config(1, 1.0);
  actors::SystemConfig config_a{config}, config_b{config};
  caf::actor_system a{config_a}, b{config_b};
  actors::NodeOptions first;
  first.config = config;
  first.node_id = 1;
  first.store = make_store(1000, 1.0f);
  auto bootstrap = actors::start_node(a, first);
  REQUIRE(bootstrap.ok());
  REQUIRE(bootstrap.value().port() != 0);
  CHECK(bootstrap.value().wait_joined().result == actors::JoinResult::welcomed);

  actors::NodeOptions second = first;
  second.node_id = 2;
  second.store = make_store(1000, 3.0f);
  second.seed_address = config::Endpoint{"127.0.0.1", bootstrap.value().port()};
  auto joined = actors::start_node(b, second);
  REQUIRE(joined.ok());
  CHECK(joined.value().wait_joined().result == actors::JoinResult::welcomed);

  // Rounds run freely; with α = 1 both hold the mean after the first: base 2 + (j % 7).
  const auto mean = read(*make_store(1000, 2.0f));
  CHECK(eventually([&] { return read(*first.store) == mean && read(*second.store) == mean; }));
  const auto status = actors::query_grid_view(b, config::Endpoint{"127.0.0.1", joined.value().port()});
  REQUIRE(status.ok());
  CHECK(status.value().nodes.size() == 2);
  CHECK(status.value().nodes[1].place.address == joined.value().address());
  CHECK(eventually([&] {
    const auto s = actors::query_grid_view(b, joined.value().actor());
    return s.ok() && s.value().nodes.size() == 2 && s.value().nodes[0].figures.rounds_done > 0 &&
           s.value().nodes[1].param_distance == 0;
  }));

  joined.value().stop();
  joined.value().wait();
  CHECK(eventually([&] { return actors::query_grid_view(a, bootstrap.value().actor()).value().nodes.size() == 1; }));
  bootstrap.value().stop();
  bootstrap.value().wait();
}

}  // namespace gridtrain::testing
