#pragma once
// Starting a node, and handling it from outside the actor system: what gridnode and the in-process cluster tests
// use. Signal handling stays with the caller.
//
//   actors::SystemConfig cfg{config};
//   caf::actor_system system{cfg};
//   auto node = actors::start_node(system, {.config = config, .seeds = {seed}});
//   if (!node) return fail(node.error());                        // bad token file, port in use, ...
//   std::cout << "listening on " << node.value().address() << std::endl;
//   auto joined = node.value().wait_joined();
//   if (joined.result == actors::JoinResult::rejected) return fail(3, joined.reason);
//   if (joined.result != actors::JoinResult::welcomed) return fail(1, joined.reason);
//   while (!node.value().wait_for(100ms))
//     if (signalled) node.value().stop();                        // sends Leave, then the node ends

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "actors/gate.hpp"
#include "actors/messages.hpp"
#include "actors/round_allowance.hpp"
#include "base/result.hpp"
#include "config/config.hpp"
#include "config/host_port.hpp"
#include "dataplane/service.hpp"
#include "learner/parameter_store.hpp"
#include "learner/training_progress.hpp"

namespace gridtrain::actors {

struct NodeOptions {
  config::Config config;
  // Where to join. Neither: bootstrap a new cluster, this node hosting its GridMaster.
  // The nodes listening at these host:ports, asked in order until one that is a member answers.
  std::vector<config::HostPort> seeds;
  caf::actor seed_node;  // a node actor in this process (in-process clusters); wins over `seeds`
  std::uint64_t node_id = 0;             // 0: a random id
  // The parameters to average. Null: learner.kind must be probe, and a probe store is made (learner/probe.hpp).
  std::shared_ptr<learner::ParameterStore> store;
  // The process's data plane, shared by its nodes (actors::Runtime keeps one). Null: the node gets one of its own,
  // on cluster.listen's host and cluster.data_port when it listens, reachable only in this process otherwise.
  std::shared_ptr<dataplane::Service> data_plane;
  // Publish the node on config.cluster.listen (port 0: a free one). In-process nodes may leave it off.
  bool listen = true;
  std::chrono::milliseconds report_interval{250};
  std::chrono::milliseconds join_timeout{10000};
  // Having lost the cluster, the node asks one member every rejoin_interval to let it back in (actors/node.hpp).
  std::chrono::milliseconds rejoin_interval{1000};
  // allreduce.every_steps > 0: this node's LineMasters start a round only when allow_rounds() allowed one.
  bool paced_by_every_steps = false;
  // See NodeSetup::grid_master_thread: off only where the actor system runs no threads (deterministic tests).
  bool grid_master_thread = true;
  // The trainer's progress, for the node's reports (gridnode status); null when it does not train.
  std::shared_ptr<learner::TrainingProgress> progress;
};

// The counters of a node's endpoint on the data plane, by dimension.
using DataCounters = std::array<dataplane::DimensionCounters, dataplane::kMaxLineDims>;
// Rounds completed, every dimension's.
std::uint64_t rounds_done(const DataCounters& counters);
// Whether some dimension has a line of at least two nodes now: the node averages (a node alone, or one that lost
// its cluster, completes no rounds).
bool averaging(const DataCounters& counters);

// A started node. Copies refer to the same node. REQUIRES: the actor system outlives every use.
class NodeHandle {
 public:
  NodeHandle(caf::actor_system& system, caf::actor node, std::uint64_t id, std::uint16_t port, std::string address,
             std::shared_ptr<learner::ParameterStore> store, std::shared_future<JoinOutcome> outcome,
             std::shared_ptr<const Gate> gate = nullptr, std::shared_ptr<const DataCounters> data_counters = nullptr,
             std::shared_ptr<RoundAllowance> allowance = nullptr);

  std::uint64_t id() const { return id_; }
  std::uint16_t port() const { return port_; }           // 0 when not listening
  const std::string& address() const { return address_; }  // host:port; "local:<id>" when not listening
  const caf::actor& actor() const { return node_; }
  const std::shared_ptr<learner::ParameterStore>& store() const { return store_; }
  // What the node's gate let in and turned away; null when the node does not listen.
  const GateCounters* gate_counters() const { return gate_ ? &gate_->counters() : nullptr; }

  // Blocks until the join is decided: welcomed, rejected (with the cluster's reason), unreachable seed (after
  // NodeOptions::join_timeout at most), or stopped. A node that is not welcomed ends by itself.
  JoinOutcome wait_joined() const;

  // Clean shutdown: the node sends Leave to the GridMaster, waits (3 s at most) for it to be taken out, and ends.
  void stop() const;
  // Ends the node at once, without Leave: how a crash looks in-process.
  void kill() const;
  // Blocks until the node has ended.
  void wait() const;
  // True once the node has ended; false if it still runs after `timeout`.
  bool wait_for(std::chrono::milliseconds timeout) const;

  // The node's counters (rounds per dimension, drops); a default NodeStats if the node has ended.
  NodeStats stats() const;
  // Its data plane endpoint's counters: read without a request, so cheap enough for every learner step, and kept
  // after the node ended (its last counts). Null for a node whose handle was made elsewhere.
  const std::shared_ptr<const DataCounters>& data_counters() const { return data_counters_; }
  // Of those: rounds completed on the node's lines (0 without counters).
  std::uint64_t rounds_done() const { return data_counters_ ? actors::rounds_done(*data_counters_) : 0; }
  // Paced by the learner (NodeOptions::paced_by_every_steps): `rounds` more rounds for each of the node's lines that
  // it masters now or later. An atomic add, and a message only where a LineMaster waits for the grant
  // (actors/round_allowance.hpp): cheap enough for every learner step. Not paced: it does nothing.
  void allow_rounds(std::uint64_t rounds) const;

  // The live grid, as this node's GridMaster sees it. Errors: the node is not (or no longer) in a cluster, or no
  // answer within `timeout`.
  Result<GridView> grid_view(std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;

  // The members of the cluster as this node last heard from its GridMaster (its GridState: refreshed with its
  // reports), ids ascending; empty before it joined. Answered by the node itself, so it does not wait on a
  // GridMaster that is being elected. Error: no answer within `timeout` (the node ended, or is stalled).
  Result<std::vector<std::uint64_t>> members(std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;

  // Warm start (actors/warm_start.hpp): copies the model of a member of the cluster into this node's store, a
  // member that shares a line with it if there is one. The member's id, or nullopt when this node is alone (there
  // is nothing to copy). On an error the store is unchanged.
  // REQUIRES: welcomed.
  Result<std::optional<std::uint64_t>> warm_start() const;

 private:
  caf::actor_system* system_;
  caf::actor node_;
  std::uint64_t id_;
  std::uint16_t port_;
  std::string address_;
  std::shared_ptr<learner::ParameterStore> store_;
  std::shared_future<JoinOutcome> outcome_;
  std::shared_future<void> ended_;  // ready once the node actor has ended
  std::shared_ptr<const Gate> gate_;  // also held by the node actor, which closes it when it ends
  std::shared_ptr<const DataCounters> data_counters_;  // its data plane endpoint's; null for a node started elsewhere
  std::shared_ptr<RoundAllowance> allowance_;          // paced: shared with its LineMasters; else null
};

// Spawns a node in `system` and starts its join. Errors (nothing is left running): the token file cannot be
// read, learner.kind is model and no store was given, the listen address or the data port cannot be bound.
Result<NodeHandle> start_node(caf::actor_system& system, NodeOptions options);

// A data plane for the nodes of this process: on config.cluster.listen's host and config.cluster.data_port when
// `listen`, else reachable only in this process; with TLS when config.cluster names the TLS files. Errors: the port
// cannot be bound, the TLS files do not load.
Result<std::shared_ptr<dataplane::Service>> start_data_plane(const config::Config& config, bool listen);

// Asks any node of a cluster for the live grid (its GridMaster answers): the node at `endpoint` (its
// cluster.listen address), or a node actor of this process. Errors: the node cannot be reached, is not in a
// cluster, or does not answer within `timeout`.
// `credentials` are what the node's gate asks of us: the cluster token, and a certificate when it runs TLS.
Result<GridView> query_grid_view(caf::actor_system& system, const config::HostPort& endpoint,
                                 const Credentials& credentials,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(5));
Result<GridView> query_grid_view(caf::actor_system& system, const caf::actor& node,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace gridtrain::actors
