#pragma once
// Warm start: a node that joins a running cluster copies the current model from a peer before it trains, so
// that it does not average a fresh initialisation into everyone's model.
//
// The peer's Node answers warm_params_atom with its store's signature and parameters (warm_params_handler, one
// line in the Node's behavior); the joining node asks with fetch_model and assigns the answer to its own store.

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "actors/messages.hpp"
#include "config/error.hpp"
#include "learner/parameter_store.hpp"

namespace gridtrain::actors {

using warm_params_atom = caf::atom_constant<caf::atom("wparams")>;  // Node: -> (signature, FloatPayload)

// The Node's answer to warm_params_atom: its model now, read under the tensor locks. A node without a store
// answers an empty payload.
caf::message_handler warm_params_handler(std::shared_ptr<learner::ParameterStore> store);

// Asks `peer` (a Node actor) for its model and assigns it to `store`. Errors: no answer within `timeout`, or the
// peer trains another model (its signature differs).
config::Status fetch_model(caf::actor_system& system, const caf::actor& peer, learner::ParameterStore& store,
                           std::chrono::milliseconds timeout = std::chrono::seconds(30));

// The member to copy from, out of `status`, for the node `self_id`: one that shares a line with it (all its
// coordinates but one) if there is one, else any other member; nullopt when it is alone (nothing to copy).
std::optional<NodeStatus> warm_start_peer(const ClusterStatus& status, std::uint64_t self_id);

}  // namespace gridtrain::actors
