#include "allreduce/elastic_update.hpp"

#include "allreduce/round.hpp"

namespace gridtrain::allreduce {

void elastic_update(std::span<float> model_slice, std::span<const float> mean_slice, float alpha) {
  // (1 - alpha) * m + alpha * mean rather than m + alpha * (mean - m): with alpha = 1 it gives
  // the mean bit for bit.
  const float keep = 1.0f - alpha;
  const std::size_t n = model_slice.size() < mean_slice.size() ? model_slice.size() : mean_slice.size();
  for (std::size_t t = 0; t < n; ++t) model_slice[t] = keep * model_slice[t] + alpha * mean_slice[t];
}

void elastic_update(std::span<float> model_slice, std::size_t offset, const Round& round, float alpha) {
  const float keep = 1.0f - alpha;
  const std::span<const float> fetched = round.send_buffer();
  round.for_each_received(offset, offset + model_slice.size(), [&](std::size_t at, std::span<const float> mean) {
    float* m = model_slice.data() + (at - offset);
    const float* s = fetched.data() + at;
    // (1 - alpha) s + alpha mean, plus whatever moved the model since the fetch: when nothing did,
    // m - s is exactly 0 and the result is bit for bit the plain update (alpha = 1 gives the mean).
    for (std::size_t t = 0; t < mean.size(); ++t) m[t] = (keep * s[t] + alpha * mean[t]) + (m[t] - s[t]);
  });
}

}  // namespace gridtrain::allreduce
