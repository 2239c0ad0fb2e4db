#pragma once
// Warm start: a node that joins a running cluster copies the current model from a peer before it trains, so
// that it does not average a fresh initialisation into everyone's model. The peer's Node answers
// warm_params_atom with its store's signature and a slice of its parameters; the joining node asks slice by slice
// with fetch_model and assigns the whole to its own store.

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "actors/reports.hpp"
#include "base/result.hpp"
#include "learner/parameter_store.hpp"

namespace gridtrain::actors {

// Asks `peer` (a Node actor) for its model and assigns it to `store`. Errors: no answer within `timeout`, or the
// peer trains another model (its signature differs); `store` is then unchanged.
Status fetch_model(caf::actor_system& system, const caf::actor& peer, learner::ParameterStore& store,
                   std::chrono::milliseconds timeout = std::chrono::seconds(30));

// The member to copy from, out of `members`, for the node `self_id`: one that shares a line with it (all its
// coordinates but one) if there is one, else any other member; nullopt when it is alone (nothing to copy).
std::optional<Placement> warm_start_peer(const std::vector<Placement>& members, std::uint64_t self_id);

}  // namespace gridtrain::actors
