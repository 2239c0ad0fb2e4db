#include "learner/shard.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

namespace gridtrain::learner {

namespace {

// SplitMix64 (Steele, Lea, Flood): small, fast, and the same sequence everywhere.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound), without modulo bias (Lemire's multiply-and-reject). REQUIRES: bound >= 1.
  std::uint64_t below(std::uint64_t bound) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * bound;
    auto low = static_cast<std::uint64_t>(m);
    if (low < bound) {
      const std::uint64_t threshold = -bound % bound;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * bound;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

 private:
  std::uint64_t state_;
};

}  // namespace

std::vector<std::size_t> shard_indices(std::size_t samples, const Shard& shard) {
  std::vector<std::size_t> all(samples);
  std::iota(all.begin(), all.end(), std::size_t{0});
  if (shard.mode == config::ShardMode::none) return all;

  if (shard.method == config::ShardMethod::permutation) {
    // Fisher-Yates from the shared seed: every node draws the same permutation.
    SplitMix64 rng(shard.seed);
    for (std::size_t i = samples; i > 1; --i) std::swap(all[i - 1], all[rng.below(i)]);
  }
  // The first samples % count shards take one extra sample: sizes within 1, and the ranges tile [0, samples).
  const std::size_t base = samples / shard.count;
  const std::size_t extra = samples % shard.count;
  const std::size_t begin = shard.index * base + std::min(shard.index, extra);
  const std::size_t end = begin + base + (shard.index < extra ? 1 : 0);
  std::vector<std::size_t> mine(all.begin() + static_cast<std::ptrdiff_t>(begin),
                                all.begin() + static_cast<std::ptrdiff_t>(end));
  std::sort(mine.begin(), mine.end());  // sequential copies; the learner shuffles its own order each epoch
  return mine;
}

Dataset take_shard(Dataset full, const Shard& shard) {
  if (shard.mode == config::ShardMode::none) return full;
  const std::vector<std::size_t> mine = shard_indices(full.count, shard);
  Dataset out;
  out.count = mine.size();
  out.sample_shape = full.sample_shape;
  out.sample_floats = full.sample_floats;
  out.classes = full.classes;
  out.images.resize(out.count * out.sample_floats);
  out.labels.resize(out.count);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    std::copy_n(full.images.begin() + static_cast<std::ptrdiff_t>(mine[i] * full.sample_floats), full.sample_floats,
                out.images.begin() + static_cast<std::ptrdiff_t>(i * out.sample_floats));
    out.labels[i] = full.labels[mine[i]];
  }
  return out;
}

}  // namespace gridtrain::learner
