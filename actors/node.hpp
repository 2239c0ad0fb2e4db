#pragma once
// Node: one member of a cluster. One per gridnode process, or many in one process (tests, the scale
// simulator): nothing here knows which.
//
// It keeps: its id, its ParameterStore, its DimensionNode and LineMaster for each of kDimsOffered dimensions (its
// children), the GridMaster's handle once welcomed, and the last GridState the GridMaster pushed.
// It reacts to: begin_atom (join: bootstrap a cluster by spawning its GridMaster, or contact a seed), Welcome or
// Reject, Join from a node that uses it as its seed (passed on to the GridMaster), stats_atom (its
// DimensionNodes' counters, asked for then), grid_view_atom (answered by the GridMaster), warm_params_atom (its
// model, for a joining node's warm start), allow_rounds_atom (allreduce.every_steps: passed on to the LineMaster
// of that dimension), stop_atom (Leave, then end).
// It tells: the GridMaster a NodeReport every report interval.
// Its children are linked to it: when it ends, they end.

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "config/config.hpp"
#include "learner/parameter_store.hpp"
#include "learner/training_progress.hpp"

namespace gridtrain::actors {

struct NodeSetup {
  config::Config config;
  std::uint64_t node_id = 0;
  std::string token;  // the cluster token; "" = none
  std::shared_ptr<learner::ParameterStore> store;
  caf::actor seed_node;                          // join through this node actor, or else
  std::optional<config::Endpoint> seed_address;  // through the node listening here, or else bootstrap
  std::chrono::milliseconds report_interval{250};
  std::chrono::milliseconds join_timeout{10000};
  bool paced_by_every_steps = false;  // see LineMasterState::every_steps_budget
  // Set once the join is decided, for threads outside the actor system (NodeHandle::wait_joined). The node may
  // end right after; a request would then find it gone. If the node ends first, the promise is broken.
  std::shared_ptr<std::promise<JoinOutcome>> outcome;
  // The trainer's samples and test accuracy, for the reports; null when the node does not train.
  std::shared_ptr<learner::TrainingProgress> progress;
};

struct NodeState {
  static inline const char* name = "node";
  NodeSetup setup;
  std::string address;
  std::vector<caf::actor> dimension_nodes;  // kDimsOffered, dimension d at index d
  std::vector<caf::actor> line_masters;
  caf::actor grid_master;  // the cluster's, once welcomed; null again if it goes down
  std::uint64_t epoch = 0;
  JoinOutcome outcome;
  std::vector<caf::typed_response_promise<JoinOutcome>> outcome_waiters;
  std::optional<GridState> grid;
  bool leaving = false;
  std::vector<float> parameters;  // fetched for a report; kept to save the allocation
  std::uint64_t bad_messages = 0;
};

caf::behavior node(caf::stateful_actor<NodeState>* self, NodeSetup setup);

}  // namespace gridtrain::actors
