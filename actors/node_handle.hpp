#pragma once
// Starting a node, and handling it from outside the actor system: what gridnode's main and the in-process
// cluster tests use. Signal handling stays with the caller.
//
//   actors::SystemConfig cfg{config};
//   caf::actor_system system{cfg};
//   auto node = actors::start_node(system, {.config = config, .seed = seed});
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

#include "actors/messages.hpp"
#include "actors/training_progress.hpp"
#include "config/config.hpp"
#include "config/error.hpp"
#include "learner/parameter_store.hpp"

namespace gridtrain::actors {

struct NodeOptions {
  config::Config config;
  // Where to join. Neither: bootstrap a new cluster, this node hosting its GridMaster.
  std::optional<config::Endpoint> seed;  // the node listening at host:port
  caf::actor seed_node;                  // a node actor in this process (in-process clusters); wins over `seed`
  std::uint64_t node_id = 0;             // 0: a random id
  // The parameters to average. Null: learner.kind must be probe, and a probe store is made (learner/probe.hpp).
  std::shared_ptr<learner::ParameterStore> store;
  // Publish the node on config.cluster.listen (port 0: a free one). In-process nodes may leave it off.
  bool listen = true;
  std::chrono::milliseconds report_interval{250};
  std::chrono::milliseconds join_timeout{10000};
  // Test hook: the rounds each LineMaster of this node may start; nullopt = no limit. grant_rounds() adds more.
  std::optional<std::uint64_t> round_budget;
  // The trainer's progress, for the node's reports (gridnode status); null when it does not train.
  std::shared_ptr<TrainingProgress> progress;
};

// A started node. Copies refer to the same node. REQUIRES: the actor system outlives every use.
class NodeHandle {
 public:
  NodeHandle(caf::actor_system& system, caf::actor node, std::uint64_t id, std::uint16_t port, std::string address,
             std::shared_ptr<learner::ParameterStore> store, std::shared_future<JoinOutcome> outcome);

  std::uint64_t id() const { return id_; }
  std::uint16_t port() const { return port_; }           // 0 when not listening
  const std::string& address() const { return address_; }  // host:port; "local:<id>" when not listening
  const caf::actor& actor() const { return node_; }
  const std::shared_ptr<learner::ParameterStore>& store() const { return store_; }

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
  // Test hook: `rounds` more rounds for this node's LineMaster of `dim`, if it masters a line now or later.
  void grant_rounds(std::uint32_t dim, std::uint64_t rounds) const;

 private:
  caf::actor_system* system_;
  caf::actor node_;
  std::uint64_t id_;
  std::uint16_t port_;
  std::string address_;
  std::shared_ptr<learner::ParameterStore> store_;
  std::shared_future<JoinOutcome> outcome_;
};

// Spawns a node in `system` and starts its join. Errors (nothing is left running): the token file cannot be
// read, learner.kind is model and no store was given, the listen address cannot be bound.
config::Result<NodeHandle> start_node(caf::actor_system& system, NodeOptions options);

}  // namespace gridtrain::actors
