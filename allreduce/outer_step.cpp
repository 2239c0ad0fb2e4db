#include "allreduce/outer_step.hpp"

#include "allreduce/counted_parts.hpp"
#include "allreduce/round.hpp"
#include "base/float_loop.hpp"

namespace gridtrain::allreduce {

namespace {

// One run of floats. `delta` true: mean[t] is the owner's delta, and the mean is s + delta.
GRIDTRAIN_FLOAT_LOOP void outer_run(std::size_t n, float* __restrict m, const float* __restrict s,
                                    const float* __restrict mean, bool delta, const float* __restrict a,
                                    float* __restrict o, float* __restrict v, float eta, float mu) {
  for (std::size_t t = 0; t < n; ++t) {
    const float mean_t = delta ? s[t] + mean[t] : mean[t];
    const float g = a[t] - mean_t;
    const float vt = mu * v[t] + g;
    const float d = -eta * (g + mu * vt);
    m[t] += (a[t] + d) - s[t];
    o[t] += d;
    v[t] = vt;
  }
}

}  // namespace

void outer_step(std::span<float> model, std::span<const float> fetched, std::span<const float> mean,
                std::span<const float> anchor, std::span<float> outer, std::span<float> velocity, OuterRates rates) {
  outer_run(model.size(), model.data(), fetched.data(), mean.data(), false, anchor.data(), outer.data(),
            velocity.data(), rates.rate, rates.momentum);
}

void outer_update(std::span<float> model_slice, std::span<float> outer_slice, std::span<float> velocity_slice,
                  std::size_t offset, const Round& round, std::span<const float> anchor, OuterRates rates) {
  const float* fetched = round.send_buffer().data();
  const float* result = round.result().data();
  // Where a chunk has no mean, its floats keep their values, o and v included; so where its mean holds one model
  // only (a quorum of one reached without the peers): that is this node's own, no line's move, and a step on it would
  // push this node's steps with the momentum of the line's.
  for_each_counted_part(round, offset, model_slice.size(), [&](std::uint32_t c, std::size_t from, std::size_t n) {
    if (round.count(c) < 2) return;
    const std::size_t at = from - offset;
    outer_run(n, model_slice.data() + at, fetched + from, result + from, round.delta(c), anchor.data() + from,
              outer_slice.data() + at, velocity_slice.data() + at, rates.rate, rates.momentum);
  });
}

}  // namespace gridtrain::allreduce
