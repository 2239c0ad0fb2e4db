#pragma once
// How far each replica of the model is from the replicas' mean, estimated from a few sampled parameters: what
// `gridnode status` shows to say whether averaging is bringing the nodes together, without shipping whole models
// to the GridMaster.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gridtrain::allreduce {

// A replica's sample holds at most this many parameters.
inline constexpr std::size_t kMaxReplicaSample = 256;

// The model indices a sample takes: floor(j * N / M) for j < M = min(N, kMaxReplicaSample). Every node samples
// the same indices, since every member has the same N.
std::vector<std::size_t> replica_sample_indices(std::size_t model_floats);

// Each replica's L2 distance to the mean of the replicas, from their samples (null for a replica with none):
// sqrt(N/M * sum over the M sampled coordinates of (x_i - mean)^2), the mean taken over the replicas that have a
// sample. Exact when N <= kMaxReplicaSample; an unbiased estimate of the squared distance otherwise (systematic
// sampling). -1 for a replica without a sample of the right size.
std::vector<double> replica_distances(const std::vector<const std::vector<float>*>& samples,
                                      std::uint64_t model_floats);

}  // namespace gridtrain::allreduce
