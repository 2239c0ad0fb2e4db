#pragma once
// An in-process cluster in real time, for the tests that need threads beside the averaging (trainers): one actor
// system, many Nodes, each with its own ParameterStore. The nodes use the same actors and messages as nodes in
// separate processes (the GridMaster included); only the transport is local (CAF's, and the data plane's, which
// hands in-process peers their chunks through memory). Waiting is by condition with a
// generous deadline, never by a timed assertion. Tests of the actors alone run deterministically instead
// (deterministic_cluster.hpp).

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "actors/messages.hpp"
#include "actors/node_handle.hpp"
#include "actors/system_config.hpp"
#include "config/config.hpp"
#include "learner/parameter_store.hpp"
#include "test_support.hpp"

namespace gridtrain::testing {

// Polls `condition` until it holds (true) or `deadline` passes (false).
bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds deadline = std::chrono::seconds(60));

class TestCluster {
 public:
  explicit TestCluster(config::Config config);
  ~TestCluster();  // kills the nodes still running; then the actor system ends

  caf::actor_system& system() { return *system_; }
  const config::Config& config() const { return config_; }

  // Starts a node and waits until it is welcomed (a failed doctest CHECK otherwise). The first bootstraps the
  // cluster, later ones join through the first node still running.
  // paced_by_every_steps: the node's LineMasters start a round only when allow_rounds() allows one.
  actors::NodeHandle& add(std::uint64_t id, std::shared_ptr<learner::ParameterStore> store,
                          bool paced_by_every_steps = false);
  void stop(std::uint64_t id);  // Leave, and wait until it ended

  // The live grid, asked of a live node; an empty status if none answers.
  actors::GridView status();

 private:
  std::vector<actors::NodeHandle> live() const;  // not stopped through this class

  config::Config config_;
  std::unique_ptr<actors::SystemConfig> system_config_;
  std::unique_ptr<caf::actor_system> system_;
  // One data plane for the process, as gridnode has: its nodes reach each other through memory.
  std::shared_ptr<dataplane::Service> data_plane_;
  std::vector<actors::NodeHandle> nodes_;
  std::vector<std::uint64_t> gone_;
};

}  // namespace gridtrain::testing
