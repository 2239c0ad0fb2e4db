#include "allreduce/elastic_update.hpp"

#include "allreduce/round.hpp"

namespace gridtrain::allreduce {

namespace {

// m <- (keep s + alpha mean) + (m - s) over n floats. Runs over the whole model every round: not inlined, with
// __restrict parameters, so that it vectorizes (GCC drops __restrict on local pointers and when it inlines, and
// would then leave the loop scalar or guard it with aliasing checks).
[[gnu::noinline]] void update_run(std::size_t n, float* __restrict m, const float* __restrict s,
                                  const float* __restrict mean, float keep, float alpha) {
  for (std::size_t t = 0; t < n; ++t) m[t] = (keep * s[t] + alpha * mean[t]) + (m[t] - s[t]);
}

// The three in one, for a folded chunk; the same arithmetic as Round's mean and update_run with s = m (whose m − s
// is kept as s − s, so that even an infinity or NaN comes out as the three passes make it).
[[gnu::noinline]] void fold_run(std::size_t n, float* __restrict m, const float* __restrict theirs,
                                float* __restrict mean, double inv, float keep, float alpha) {
  for (std::size_t t = 0; t < n; ++t) {
    const float s = m[t];
    const float mu = static_cast<float>((static_cast<double>(s) + theirs[t]) * inv);
    mean[t] = mu;
    m[t] = (keep * s + alpha * mu) + (s - s);
  }
}
[[gnu::noinline]] void fold_run(std::size_t n, float* __restrict m, const double* __restrict sum,
                                const float* __restrict theirs, float* __restrict mean, double inv, float keep,
                                float alpha) {
  for (std::size_t t = 0; t < n; ++t) {
    const float s = m[t];
    const float mu = static_cast<float>(((sum[t] + s) + theirs[t]) * inv);
    mean[t] = mu;
    m[t] = (keep * s + alpha * mu) + (s - s);
  }
}

}  // namespace

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
    // (1 - alpha) s + alpha mean, plus whatever moved the model since the fetch: when nothing did,
    // m - s is exactly 0 and the result is bit for bit the plain update (alpha = 1 gives the mean).
    update_run(mean.size(), model_slice.data() + (at - offset), fetched.data() + at, mean.data(), keep, alpha);
  });
}

void fold_contribution(std::span<float> model_slice, std::span<const double> sum, std::span<const float> theirs,
                       std::span<float> mean, double inv, float alpha) {
  if (sum.empty()) {
    fold_run(model_slice.size(), model_slice.data(), theirs.data(), mean.data(), inv, 1.0f - alpha, alpha);
  } else {
    fold_run(model_slice.size(), model_slice.data(), sum.data(), theirs.data(), mean.data(), inv, 1.0f - alpha,
             alpha);
  }
}

}  // namespace gridtrain::allreduce
