#pragma once
// Warm start: a node that joins a running cluster copies the current model from a peer before it trains, so
// that it does not average a fresh initialisation into everyone's model. The peer's Node answers
// warm_params_atom with its store's signature and a slice of its parameters; the joining node asks slice by slice
// with fetch_model and assigns the whole to its own store.

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "actors/messages.hpp"
#include "actors/reports.hpp"
#include "base/result.hpp"
#include "learner/parameter_store.hpp"

namespace gridtrain::actors {

// The floats to ask for at `offset` of a model of `floats`: `want` (at most kWarmSliceFloats), or what is left.
std::uint64_t warm_slice_count(std::uint64_t floats, std::uint64_t offset, std::uint64_t want = kWarmSliceFloats);

// A joiner's first slice: 64 KB, which crosses even a slow link in a fraction of a connection timeout.
inline constexpr std::uint64_t kWarmFirstSliceFloats = std::uint64_t{1} << 14;

// The size of the next slice: as many floats as the last one (`floats`, `took` from the ask to the answer) would
// move in `budget` at the same rate, from kWarmFirstSliceFloats to kWarmSliceFloats. Why: CAF 0.17 counts a
// connection's silence from the last whole message it read, so a message that takes longer than
// cluster.connection_timeout_ms to arrive closes the connection at the receiver. At 5 Mbit/s a 1 MB slice took 1.6 s
// against the default 1 s: the joiner dropped its connection to the member it copied from (the GridMaster), and the
// cluster that was forming broke. The node asks with a budget of a quarter of the connection timeout.
std::uint64_t next_warm_slice_floats(std::uint64_t floats, std::chrono::nanoseconds took,
                                     std::chrono::nanoseconds budget);

// One answer to (warm_params_atom, offset, count), asked of a member: copies `slice` into `model` at `offset` if it
// is a slice of the model `store` holds (the same signature and size) of the `count` floats asked for; otherwise
// returns why not, and copies nothing. REQUIRES: offset + count <= model.size().
Status place_warm_slice(const learner::ParameterStore& store, std::span<float> model, std::uint64_t offset,
                        std::uint64_t count, std::uint64_t signature, std::uint64_t size, const FloatPayload& slice);

// Asks `peer` (a Node actor) for its model and assigns it to `store`. Errors: no answer within `timeout`, or the
// peer trains another model (its signature differs); `store` is then unchanged.
Status fetch_model(caf::actor_system& system, const caf::actor& peer, learner::ParameterStore& store,
                   std::chrono::milliseconds timeout = std::chrono::seconds(30));

// The member to copy from, out of `members`, for the node `self_id`: one that shares a line with it (all its
// coordinates but one) if there is one, else any other member; nullopt when it is alone (nothing to copy).
std::optional<Placement> warm_start_peer(const std::vector<Placement>& members, std::uint64_t self_id);

}  // namespace gridtrain::actors
