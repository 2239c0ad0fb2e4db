#include "allreduce/replica_distance.hpp"

#include <algorithm>
#include <cmath>

namespace gridtrain::allreduce {

std::vector<std::size_t> replica_sample_indices(std::size_t model_floats) {
  const std::size_t m = std::min(model_floats, kMaxReplicaSample);
  std::vector<std::size_t> out(m);
  for (std::size_t j = 0; j < m; ++j) out[j] = j * model_floats / m;
  return out;
}

std::vector<double> replica_distances(const std::vector<const std::vector<float>*>& samples,
                                      std::uint64_t model_floats) {
  const std::size_t m = std::min<std::uint64_t>(model_floats, kMaxReplicaSample);
  std::vector<double> out(samples.size(), -1);
  std::vector<double> mean(m, 0.0);
  std::size_t reporting = 0;
  for (const auto* s : samples) {
    if (!s || s->size() != m) continue;
    ++reporting;
    for (std::size_t j = 0; j < m; ++j) mean[j] += (*s)[j];
  }
  if (reporting == 0 || m == 0) return out;
  for (double& x : mean) x /= static_cast<double>(reporting);
  const double scale = static_cast<double>(model_floats) / static_cast<double>(m);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto* s = samples[i];
    if (!s || s->size() != m) continue;
    double sum = 0;
    for (std::size_t j = 0; j < m; ++j) sum += ((*s)[j] - mean[j]) * ((*s)[j] - mean[j]);
    out[i] = std::sqrt(scale * sum);
  }
  return out;
}

}  // namespace gridtrain::allreduce
