#include "learner/probe.hpp"

#include <algorithm>

namespace gridtrain::learner {

float probe_initial_value(const config::LearnerConfig& learner, std::uint64_t node_id) {
  if (learner.probe_value) return static_cast<float>(*learner.probe_value);
  return static_cast<float>(node_id % 1000);
}

std::unique_ptr<ParameterStore> make_probe_store(const config::LearnerConfig& learner, std::uint64_t node_id) {
  auto store = std::make_unique<ParameterStore>(std::vector<TensorSpec>{{"probe", {learner.probe_floats}}});
  // No other thread has the store yet, so no lock is needed.
  auto values = store->data(0);
  std::fill(values.begin(), values.end(), probe_initial_value(learner, node_id));
  return store;
}

}  // namespace gridtrain::learner
