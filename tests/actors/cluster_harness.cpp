#include "cluster_harness.hpp"

#include <doctest/doctest.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

namespace gridtrain::testing {

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

TestCluster::TestCluster(config::Config config) : config_(std::move(config)) {
  spdlog::set_level(spdlog::level::err);  // joins and leaves: keep the test output readable
  system_config_ = std::make_unique<actors::SystemConfig>(config_);
  system_ = std::make_unique<caf::actor_system>(*system_config_);
  auto data_plane = actors::start_data_plane(config_, /*listen=*/false);
  REQUIRE(data_plane.ok());
  data_plane_ = std::move(data_plane).value();
}

TestCluster::~TestCluster() {
  for (const auto& n : live()) n.kill();
  for (const auto& n : nodes_) n.wait();
  nodes_.clear();
  data_plane_->stop();
  system_.reset();
}

actors::NodeHandle& TestCluster::add(std::uint64_t id, std::shared_ptr<learner::ParameterStore> store,
                                     bool paced_by_every_steps) {
  actors::NodeOptions options = node_options(config_, id, std::move(store));
  options.listen = false;
  options.data_plane = data_plane_;
  options.paced_by_every_steps = paced_by_every_steps;
  const auto running = live();
  if (!running.empty()) options.seed_node = running.front().actor();
  auto started = actors::start_node(*system_, std::move(options));
  REQUIRE(started.ok());
  nodes_.push_back(started.value());
  const auto outcome = nodes_.back().wait_joined();
  CHECK_MESSAGE(outcome.result == actors::JoinResult::welcomed, outcome.reason);
  return nodes_.back();
}

std::vector<actors::NodeHandle> TestCluster::live() const {
  std::vector<actors::NodeHandle> out;
  for (const auto& n : nodes_)
    if (std::find(gone_.begin(), gone_.end(), n.id()) == gone_.end()) out.push_back(n);
  return out;
}

void TestCluster::stop(std::uint64_t id) {
  for (const auto& n : nodes_) {
    if (n.id() != id) continue;
    gone_.push_back(id);
    n.stop();
    n.wait();
  }
}

actors::GridView TestCluster::status() {
  for (const auto& n : live()) {
    auto s = actors::query_grid_view(*system_, n.actor(), std::chrono::seconds(10));
    if (s.ok()) return s.value();
  }
  return {};
}

}  // namespace gridtrain::testing
