#pragma once
// The live grid as `gridnode status` shows it: how to ask a node for it, and how to print it.

#include <caf/all.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "config/endpoint.hpp"
#include "config/error.hpp"

namespace gridtrain::actors {

// A NodeReport samples at most this many parameters.
inline constexpr std::size_t max_report_sample = 256;

// The model indices a NodeReport samples: floor(j * N / M) for j < M = min(N, max_report_sample). Every node
// samples the same indices, since every member has the same N.
std::vector<std::size_t> report_sample_indices(std::size_t model_floats);

// Each node's L2 distance to the cluster mean, estimated from the report samples (a node's is null when it has
// not reported yet): sqrt(N/M * sum over the M sampled coordinates of (x_i - mean)^2), where the mean is over the
// nodes that reported. Exact when N <= max_report_sample; an unbiased estimate of the squared distance
// otherwise (systematic sampling), which is what status needs: are the replicas converging? -1 where unknown.
std::vector<double> param_distances(const std::vector<const std::vector<float>*>& samples, std::uint64_t model_floats);

// One JSON object: {"epoch", "layout_version", "dims", "shape": [..], "nodes": [{"id", "id_hex", "address",
// "coords": [..], "masters": [dims], "rounds_done", "param_mean", "param_l2", "samples", "test_accuracy",
// "param_distance", "stale_dropped", "quorum_shortfalls"}]}. test_accuracy is -1 until the learner evaluates;
// param_distance is null where unknown.
std::string to_json(const ClusterStatus& status);

// The same as a table for people, one line per node, with a header line.
std::string to_table(const ClusterStatus& status);

// Asks the node at `endpoint` (its cluster.listen address) for the live grid. Errors: the node cannot be
// reached, is not in a cluster, or does not answer within `timeout`.
config::Result<ClusterStatus> query_status(caf::actor_system& system, const config::Endpoint& endpoint,
                                           std::chrono::milliseconds timeout = std::chrono::seconds(5));

// The same, for a node actor of this process (or one already connected).
config::Result<ClusterStatus> query_status(caf::actor_system& system, const caf::actor& node,
                                           std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace gridtrain::actors
