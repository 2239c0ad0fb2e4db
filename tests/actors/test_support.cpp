#include "test_support.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <fstream>

#include "actors/token_proof.hpp"

namespace gridtrain::testing {

config::Config cluster_config(int dims, double alpha, int max_chunk_floats) {
  config::Config c = config::defaults();
  c.learner.kind = config::LearnerKind::probe;
  if (dims > 0)
    c.grid.dims = dims;
  else
    c.grid.dims.reset();
  c.grid.rounds_in_flight = 3;
  c.allreduce.reduce_threshold = 1;
  c.allreduce.complete_threshold = 1;
  c.allreduce.advance_threshold = 1;
  c.allreduce.quorum = config::QuorumMode::fraction;
  c.allreduce.elastic_rate = alpha;
  c.allreduce.max_chunk_floats = max_chunk_floats;
  c.cluster.listen = config::HostPort{"127.0.0.1", 0};
  return c;
}

std::shared_ptr<learner::ParameterStore> make_store(std::size_t floats, float base) {
  const int w = static_cast<int>(floats * 2 / 3);
  const int b = static_cast<int>(floats) - w;
  auto store = std::make_shared<learner::ParameterStore>(
      std::vector<learner::TensorSpec>{{"w", {w}}, {"b", {b}}});
  std::vector<float> values(floats);
  for (std::size_t j = 0; j < floats; ++j) values[j] = base + static_cast<float>(j % 7);
  store->assign(values);
  return store;
}

std::vector<float> read(const learner::ParameterStore& store) {
  std::vector<float> out(store.size());
  store.fetch(out);
  return out;
}

TokenFile::TokenFile(const std::string& token) {
  static int counter = 0;
  dir = std::filesystem::temp_directory_path() /
        ("gridtrain-actors-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "token") << token << "\n";
}

TokenFile::~TokenFile() { std::filesystem::remove_all(dir); }

actors::NodeOptions node_options(const config::Config& config, std::uint64_t id,
                                 std::shared_ptr<learner::ParameterStore> store) {
  actors::NodeOptions options;
  options.config = config;
  options.node_id = id;
  options.store = std::move(store);
  return options;
}

actors::NodeOptions joiner_options(const actors::NodeOptions& like, std::uint64_t id,
                                   std::shared_ptr<learner::ParameterStore> store,
                                   const std::vector<std::uint16_t>& seed_ports) {
  actors::NodeOptions options = like;
  options.node_id = id;
  options.store = std::move(store);
  options.seeds.clear();
  for (std::uint16_t port : seed_ports) options.seeds.push_back(config::HostPort{"127.0.0.1", port});
  return options;
}

actors::NodeHandle start_welcomed(caf::actor_system& system, const actors::NodeOptions& options) {
  auto node = actors::start_node(system, options);
  REQUIRE(node.ok());
  REQUIRE(node.value().wait_joined().result == actors::JoinResult::welcomed);
  return node.value();
}

EndNodesAtExit::~EndNodesAtExit() {
  for (const auto& node : nodes_) node.kill();  // nothing for a node that has ended
  for (const auto& node : nodes_) node.wait();
}

const actors::NodeHandle& EndNodesAtExit::hold(const actors::NodeHandle& node) {
  nodes_.push_back(node);
  return node;
}

const Result<actors::NodeHandle>& EndNodesAtExit::hold(const Result<actors::NodeHandle>& node) {
  if (node.ok()) nodes_.push_back(node.value());
  return node;
}

std::string token_in(const std::string& path) {
  auto token = actors::read_token(path);
  REQUIRE(token.ok());
  return std::move(token).value();
}

}  // namespace gridtrain::testing
