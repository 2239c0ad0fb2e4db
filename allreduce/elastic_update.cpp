#include "allreduce/elastic_update.hpp"

#include <algorithm>

#include "allreduce/counted_parts.hpp"
#include "allreduce/round.hpp"
#include "base/float_loop.hpp"

namespace gridtrain::allreduce {

namespace {

// The loops are GRIDTRAIN_FLOAT_LOOPs (base/float_loop.hpp): not inlined, __restrict, AVX2 where the CPU has it.

// m <- (keep s + alpha mean) + (m - s).
GRIDTRAIN_FLOAT_LOOP void update_run(std::size_t n, float* __restrict m, const float* __restrict s,
                                     const float* __restrict mean, float keep, float alpha) {
  for (std::size_t t = 0; t < n; ++t) m[t] = (keep * s[t] + alpha * mean[t]) + (m[t] - s[t]);
}
// m <- m + alpha delta.
GRIDTRAIN_FLOAT_LOOP void delta_run(std::size_t n, float* __restrict m, const float* __restrict delta, float alpha) {
  for (std::size_t t = 0; t < n; ++t) m[t] += alpha * delta[t];
}
// p <- p + alpha (mean - s): what update_run adds to m, collected apart (elastic_pull).
GRIDTRAIN_FLOAT_LOOP void pull_run(std::size_t n, float* __restrict p, const float* __restrict s,
                                   const float* __restrict mean, float alpha) {
  for (std::size_t t = 0; t < n; ++t) p[t] += alpha * (mean[t] - s[t]);
}
// The reduce's loops. The mean multiplies by 1/n rather than divides: a division per element bound the reduce at
// 64 MB (a third of a node's reduce time in divpd alone); only the owner of a chunk computes its mean, so every
// peer applies the same one. The sum is in double, its terms in one order (ours, then the peers' in peer order), so
// that a chunk folded and one reduced over a snapshot come out the same.

// With up to three other contributions (two to four peers), in one pass: the mean of a (ours) and b0..b<K-1>; with
// kMean the mean out, with kDelta each b's delta in its place; with kFold a is the model, and gets its update (the
// update's arithmetic, with s for the snapshot and m − s kept as s − s, so that even an infinity or NaN comes out as
// the reduce over a snapshot and update_run make it). Without kFold a is only read. One loop over the chunk rather
// than several over L1 tiles (below): lines of 2-4 peers are the common case, and with 4 processes at 64 MB the
// tiles' loops took 17% of the nodes' CPU (perf), this one loop 10%.
template <std::uint32_t K, bool kMean, bool kDelta, bool kFold>
GRIDTRAIN_FLOAT_LOOP void peers_run(std::size_t n, float* __restrict a, float* __restrict b0, float* __restrict b1,
                                    float* __restrict b2, double inv, float* __restrict mean, float keep, float alpha) {
  static_assert(K >= 1 && K <= 3);
  for (std::size_t t = 0; t < n; ++t) {
    const float s = a[t];
    double sum = static_cast<double>(s) + b0[t];
    if constexpr (K >= 2) sum += b1[t];
    if constexpr (K >= 3) sum += b2[t];
    const double mu = sum * inv;
    if constexpr (kMean) mean[t] = static_cast<float>(mu);
    if constexpr (kDelta) {
      b0[t] = static_cast<float>(mu - b0[t]);
      if constexpr (K >= 2) b1[t] = static_cast<float>(mu - b1[t]);
      if constexpr (K >= 3) b2[t] = static_cast<float>(mu - b2[t]);
    }
    if constexpr (kFold) a[t] = (keep * s + alpha * static_cast<float>(mu)) + (s - s);
  }
}

// The same, each of theirs from its float `at`, its shape picked at run time.
template <std::uint32_t K>
void peers_run(std::size_t n, float* a, float* const* theirs, std::size_t at, double inv, float* mean, bool deltas,
               bool fold, float keep, float alpha) {
  float* b0 = theirs[0] + at;
  float* b1 = K >= 2 ? theirs[1] + at : nullptr;
  float* b2 = K >= 3 ? theirs[2] + at : nullptr;
  // Without a fold there is always a mean (reduce_chunk's contract).
  if (!fold && deltas) return peers_run<K, true, true, false>(n, a, b0, b1, b2, inv, mean, keep, alpha);
  if (!fold) return peers_run<K, true, false, false>(n, a, b0, b1, b2, inv, mean, keep, alpha);
  if (mean && deltas) return peers_run<K, true, true, true>(n, a, b0, b1, b2, inv, mean, keep, alpha);
  if (mean) return peers_run<K, true, false, true>(n, a, b0, b1, b2, inv, mean, keep, alpha);
  if (deltas) return peers_run<K, false, true, true>(n, a, b0, b1, b2, inv, mean, keep, alpha);
  peers_run<K, false, false, true>(n, a, b0, b1, b2, inv, mean, keep, alpha);
}

// Over one tile, for more peers.
GRIDTRAIN_FLOAT_LOOP void assign_run(std::size_t n, double* __restrict acc, const float* __restrict a) {
  for (std::size_t t = 0; t < n; ++t) acc[t] = a[t];
}
GRIDTRAIN_FLOAT_LOOP void sum_run(std::size_t n, double* __restrict acc, const float* __restrict a,
                                  const float* __restrict b) {
  for (std::size_t t = 0; t < n; ++t) acc[t] = static_cast<double>(a[t]) + b[t];
}
GRIDTRAIN_FLOAT_LOOP void add_run(std::size_t n, double* __restrict acc, const float* __restrict a) {
  for (std::size_t t = 0; t < n; ++t) acc[t] += a[t];
}
// The sum times 1/n, in place; with kMean the mean out, with kFold the model's update (as peers_run's).
template <bool kMean, bool kFold>
GRIDTRAIN_FLOAT_LOOP void mean_run(std::size_t n, double* __restrict acc, double inv, float* __restrict mean,
                                   float* __restrict m, float keep, float alpha) {
  for (std::size_t t = 0; t < n; ++t) {
    acc[t] *= inv;
    if constexpr (kMean) mean[t] = static_cast<float>(acc[t]);
    if constexpr (kFold) {
      const float s = m[t];
      m[t] = (keep * s + alpha * static_cast<float>(acc[t])) + (s - s);
    }
  }
}
// theirs <- float(mean - theirs), in place.
GRIDTRAIN_FLOAT_LOOP void delta_in_place_run(std::size_t n, float* __restrict theirs, const double* __restrict mean) {
  for (std::size_t t = 0; t < n; ++t) theirs[t] = static_cast<float>(mean[t] - theirs[t]);
}

// A tile of the sum stays in the L1 cache while each contribution is added and each delta written.
constexpr std::size_t kTile = 512;

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
  const float* fetched = round.send_buffer().data();
  const float* result = round.result().data();
  for_each_counted_part(round, offset, model_slice.size(), [&](std::uint32_t c, std::size_t from, std::size_t n) {
    float* m = model_slice.data() + (from - offset);
    if (round.delta(c))
      delta_run(n, m, result + from, alpha);
    else
      // (1 - alpha) s + alpha mean, plus whatever moved the model since the fetch: when nothing did, m - s is
      // exactly 0 and the result is bit for bit the plain update (alpha = 1 gives the mean).
      update_run(n, m, fetched + from, result + from, keep, alpha);
  });
}

void elastic_pull(std::span<float> pull_slice, std::size_t offset, const Round& round, float alpha) {
  const float* fetched = round.send_buffer().data();
  const float* result = round.result().data();
  for_each_counted_part(round, offset, pull_slice.size(), [&](std::uint32_t c, std::size_t from, std::size_t n) {
    float* p = pull_slice.data() + (from - offset);
    if (round.delta(c))
      delta_run(n, p, result + from, alpha);
    else
      pull_run(n, p, fetched + from, result + from, alpha);
  });
}

void reduce_chunk(std::size_t n, const float* own, float* const* theirs, std::uint32_t k, std::size_t at, double inv,
                  float* mean, bool deltas, float* model, float alpha) {
  const float keep = 1.0f - alpha;
  // Ours: read from the model where it is folded (and written there), else only read.
  float* first = model ? model : const_cast<float*>(own);
  const bool fold = model != nullptr;
  // Two to four peers: one pass (peers_run). More: tile by tile.
  if (first && k == 1) return peers_run<1>(n, first, theirs, at, inv, mean, deltas, fold, keep, alpha);
  if (first && k == 2) return peers_run<2>(n, first, theirs, at, inv, mean, deltas, fold, keep, alpha);
  if (first && k == 3) return peers_run<3>(n, first, theirs, at, inv, mean, deltas, fold, keep, alpha);
  double acc[kTile];
  for (std::size_t base = 0; base < n; base += kTile) {
    const std::size_t len = std::min(kTile, n - base);
    // The first two terms: ours and the first peer's, or (without ours) the first two peers'.
    std::uint32_t q = 0;
    const float* a = first ? first + base : theirs[q++] + at + base;
    if (q < k) {
      sum_run(len, acc, a, theirs[q++] + at + base);
    } else {
      assign_run(len, acc, a);  // a single contribution
    }
    for (; q < k; ++q) add_run(len, acc, theirs[q] + at + base);
    float* const m = model ? model + base : nullptr;
    float* const out = mean ? mean + base : nullptr;
    if (m && out) mean_run<true, true>(len, acc, inv, out, m, keep, alpha);
    if (m && !out) mean_run<false, true>(len, acc, inv, out, m, keep, alpha);
    if (!m) mean_run<true, false>(len, acc, inv, out, m, keep, alpha);
    if (deltas) {
      for (q = 0; q < k; ++q) delta_in_place_run(len, theirs[q] + at + base, acc);
    }
  }
}

void fold_chunk(std::span<float> model_slice, const FoldTarget& target, std::size_t at, float alpha) {
  reduce_chunk(model_slice.size(), nullptr, target.theirs.data(), static_cast<std::uint32_t>(target.theirs.size()), at,
               target.inv, target.mean.empty() ? nullptr : target.mean.data() + at, target.deltas, model_slice.data(),
               alpha);
}

}  // namespace gridtrain::allreduce
