#pragma once
// The probe "learner" (learner.kind: probe): no training, only a vector to average. It is the parameter source
// until the learner lands, and afterwards a cluster health check, as nccl-tests is for NCCL: every node's vector
// starts at a known value, so anyone can watch the nodes converge to the mean from outside (gridnode status).

#include <cstdint>
#include <memory>

#include "config/config.hpp"
#include "learner/parameter_store.hpp"

namespace gridtrain::learner {

// learner.probe_value if set; else (node_id mod 1000), an integer: exact in float, different for most nodes,
// and its means are easy to check by eye.
float probe_initial_value(const config::LearnerConfig& learner, std::uint64_t node_id);

// A store with one tensor "probe" of learner.probe_floats floats, each set to probe_initial_value(). Its
// signature is the model signature: two probes of different lengths are different models.
std::unique_ptr<ParameterStore> make_probe_store(const config::LearnerConfig& learner, std::uint64_t node_id);

}  // namespace gridtrain::learner
