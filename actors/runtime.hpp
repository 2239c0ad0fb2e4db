#pragma once
// Runtime: one process's actor system, made from the run config, and the way everything outside actors/ reaches
// the actors (gridnode's commands, the benchmarks): start a node, ask any member for the live grid. Tests that
// drive actors themselves use system().
//
//   actors::Runtime runtime{config};
//   auto node = runtime.start_node({.config = config, .seeds = {seed}});
//   auto view = runtime.grid_view(config::HostPort{"10.0.0.5", 7000}, token);

#include <caf/actor_system.hpp>

#include <chrono>
#include <functional>

#include "actors/node_handle.hpp"
#include "actors/reports.hpp"
#include "actors/system_config.hpp"
#include "base/result.hpp"
#include "config/config.hpp"
#include "config/host_port.hpp"

namespace gridtrain::actors {

class Runtime {
 public:
  // The middleman's heartbeat and connection timeout, and the scheduler, come from `config` (SystemConfig).
  explicit Runtime(const config::Config& config);
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // See actors::start_node; a node given no data plane gets the runtime's (shared_data_plane). REQUIRES: the Runtime
  // outlives the node's handle.
  Result<NodeHandle> start_node(NodeOptions options);

  // The data plane this process's nodes share: started at the first call (actors::start_data_plane: cluster.listen's
  // host and cluster.data_port when `listen`), the same one after. A caller that must know of it before its node
  // starts (gridnode run: whether the node's rounds are paced by the data plane's CPU clock) calls this first.
  Result<std::shared_ptr<dataplane::Service>> shared_data_plane(const config::Config& config, bool listen);

  // The live grid, asked of the member listening at `endpoint`, passing its gate with `credentials` (an empty
  // token and no TLS for a cluster without them): see actors::query_grid_view.
  Result<GridView> grid_view(const config::HostPort& endpoint, const Credentials& credentials,
                             std::chrono::milliseconds timeout = std::chrono::seconds(5));

  // Drops what the calling thread keeps of any actor system: CAF 0.17 keeps, in every thread that made a system or
  // spawned an actor (a scoped_actor included: a question to a node), a reference to that system's logger until the
  // thread ends, and ~actor_system waits until every such reference is gone. A thread that outlives the system and
  // is not the one that destroys it (a Python host's) calls this after each use, or the system's end waits for ever.
  static void release_calling_thread();

  // What averaging costs this process in CPU time, in all: the data plane's thread and the actors' threads (CAF's,
  // SystemConfig::actor_threads), which carry a round's messages and timers. A training node's cpu_share paces by
  // it (learner/round_pacing.hpp). The function holds what it reads, so it may outlive the Runtime. Empty before
  // the data plane is started: without one a node runs no rounds to pace.
  std::function<std::chrono::nanoseconds()> averaging_cpu() const;

  caf::actor_system& system() { return system_; }
  // The nodes' data plane; null before it is started (shared_data_plane, or the first start_node).
  const std::shared_ptr<dataplane::Service>& data_plane() const { return data_plane_; }

 private:
  SystemConfig config_;  // outlives system_
  caf::actor_system system_;
  std::shared_ptr<dataplane::Service> data_plane_;
};

}  // namespace gridtrain::actors
