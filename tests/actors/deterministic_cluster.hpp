#pragma once
// An in-process cluster run deterministically: real actors::node actors (their DimensionNodes, LineMasters,
// data plane endpoints, and the GridMaster of the node that bootstraps) on a DeterministicSystem and its data plane. A node joins as in-process
// nodes do, through the first live node's actor (NodeSetup::seed_node), when it gets begin_atom; then the test runs
// the cluster message by message. Paced nodes (NodeSetup::allowance) run exactly the rounds allowed
// them, and the cluster falls idle: run() returns. Rounds running freely never end, so such a test runs a bounded
// number of messages, or until a condition holds (run_until). No node reports (tick) or times out its join: the
// clock stands still unless the test moves it; so no line waits to settle (allreduce.line_settle_ms is 0 here).

#include <caf/all.hpp>

#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <vector>

#include "actors/grid_master.hpp"
#include "actors/messages.hpp"
#include "actors/node.hpp"
#include "config/config.hpp"
#include "deterministic_system.hpp"
#include "learner/parameter_store.hpp"

namespace gridtrain::testing {

class DeterministicCluster {
 public:
  explicit DeterministicCluster(config::Config config);

  DeterministicSystem& sim() { return sim_; }
  const config::Config& config() const { return config_; }

  // How node `id` starts: the cluster's config, the token its cluster.token_file holds (read as start_node reads
  // it), `store`, and the first live node as its seed (none: it bootstraps the cluster).
  actors::NodeSetup setup(std::uint64_t id, std::shared_ptr<learner::ParameterStore> store,
                          bool paced_by_every_steps = false) const;
  // Spawns the node and sends it begin_atom; runs nothing.
  caf::actor start(actors::NodeSetup setup);
  // start(setup(...)), then runs until its join is decided; a failed CHECK unless it was welcomed.
  caf::actor add(std::uint64_t id, std::shared_ptr<learner::ParameterStore> store, bool paced_by_every_steps = false);

  caf::actor node(std::uint64_t id) const;
  const std::shared_ptr<learner::ParameterStore>& store(std::uint64_t id) const;
  // How the node's join ended, as it told its NodeSetup::outcome: pending until decided; still there once the
  // node has ended.
  actors::JoinOutcome outcome(std::uint64_t id) const;
  bool ended(std::uint64_t id) const;
  std::vector<std::uint64_t> live() const;  // started and not ended, in the order started

  // A clean shutdown, as gridnode's on a signal: stop_atom, so the node sends Leave and ends once the GridMaster
  // has taken it out. Runs until it has ended.
  void stop(std::uint64_t id);
  // Ends the node at once, without Leave: how a crash looks in-process. Runs until it has ended.
  void kill(std::uint64_t id);

  // Read directly, without a message: for conditions checked after every message of a run.
  actors::NodeState& state(std::uint64_t id) const;
  actors::GridMasterState& grid_master() const;  // hosted by the node that bootstrapped, while it runs
  caf::actor grid_master_actor() const;
  std::vector<std::uint64_t> members() const;    // as the GridMaster has them, ascending
  std::uint64_t rounds_in(std::uint64_t id, std::uint32_t dim) const;  // as the node's DimensionNode counts them
  std::uint64_t rounds_total(std::uint64_t id) const;

  // Asked, as `gridnode status` asks: the node's counters (stats_atom), and the live grid (grid_view_atom, of the
  // first live node).
  actors::NodeStats stats(std::uint64_t id);
  actors::GridView status();

 private:
  struct Member {
    std::uint64_t id;
    caf::actor actor;
    std::shared_ptr<learner::ParameterStore> store;
    std::shared_future<actors::JoinOutcome> outcome;
  };
  const Member& member(std::uint64_t id) const;

  config::Config config_;
  DeterministicSystem sim_;
  std::vector<Member> members_;
  caf::actor bootstrap_;
};

}  // namespace gridtrain::testing
