// Every size, line length and chunking held to the same data patterns, in one table (as Gloo's
// tests do): with thresholds of 1 and no losses, every peer ends with the exact mean.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "tests/allreduce/simulated_line.hpp"

using namespace gridtrain::allreduce;
using gridtrain::allreduce::testing::Delivery;
using gridtrain::allreduce::testing::mean_held;
using gridtrain::allreduce::testing::SimulatedLine;

namespace {

enum class Pattern { rank, strided };

float value(Pattern pattern, std::uint32_t rank, std::size_t index) {
  // Both stay below 2^24, so every value is an exact float and the mean's sum is exact.
  if (pattern == Pattern::rank) return static_cast<float>(rank);
  return static_cast<float>(rank * std::size_t{1} * (1u << 20) + index);
}

// The exact mean over all p peers, computed the slow, obvious way.
float exact_mean(Pattern pattern, std::uint32_t p, std::size_t index) {
  double sum = 0;
  for (std::uint32_t r = 0; r < p; ++r) sum += value(pattern, r, index);
  return static_cast<float>(sum / p);
}

struct Case {
  std::size_t n;
  std::uint32_t p;
  std::size_t chunk;
  Delivery delivery;
  Pattern pattern;
  QuorumMode mode;
};

std::string describe(const Case& c) {
  std::ostringstream out;
  out << "n=" << c.n << " p=" << c.p << " chunk=" << c.chunk
      << (c.delivery == Delivery::in_order ? " in-order" : " shuffled")
      << (c.pattern == Pattern::rank ? " rank" : " strided")
      << (c.mode == QuorumMode::fraction ? " fraction" : " timeout");
  return out.str();
}

// Runs one case; returns what went wrong, or "" if every peer holds the exact mean everywhere.
std::string run_exact(const Case& c, std::uint64_t seed) {
  RoundConfig config;
  config.reduce_threshold = 1.0;
  config.complete_threshold = 1.0;
  config.quorum = c.mode;
  config.max_chunk_floats = c.chunk;
  SimulatedLine line(c.n, c.p, config, RoundKey{.epoch = 1, .layout_version = 2, .dim = 0, .line = 5, .round = 7});
  line.fill([&](std::uint32_t rank, std::size_t index) { return value(c.pattern, rank, index); });
  const auto stats = line.run(c.delivery, seed);
  if (!stats.complete_before_deadline) return "a peer needed the deadline or finish() to complete";
  for (Verdict v : {Verdict::duplicate, Verdict::late, Verdict::stale, Verdict::newer, Verdict::malformed}) {
    if (line.verdicts(v) != 0) return "a message was " + std::string(to_string(v));
  }
  std::vector<float> expected(c.n);
  for (std::size_t t = 0; t < c.n; ++t) expected[t] = exact_mean(c.pattern, c.p, t);
  for (std::uint32_t i = 0; i < c.p; ++i) {
    const Round& round = line.peer(i);
    const Partition& part = round.partition();
    if (round.received_chunks() != part.chunk_count()) return "peer " + std::to_string(i) + " misses chunks";
    for (std::uint32_t k = 0; k < part.chunk_count(); ++k) {
      if (round.count(k) != c.p) return "peer " + std::to_string(i) + " chunk " + std::to_string(k) + " count";
    }
    for (std::size_t t = 0; t < c.n; ++t) {
      const float held = mean_held(round, t);  // a delta and our contribution: exact with these patterns
      if (held != expected[t]) {
        return "peer " + std::to_string(i) + " index " + std::to_string(t) + ": " + std::to_string(held) +
               " != " + std::to_string(expected[t]);
      }
    }
    const RoundCounters& counters = round.counters();
    if (counters.late + counters.duplicate + counters.stale + counters.newer + counters.malformed +
            counters.short_reductions + counters.missing_at_completion !=
        0) {
      return "peer " + std::to_string(i) + " counted a problem";
    }
  }
  return "";
}

}  // namespace

TEST_CASE("with thresholds of 1 and no losses every peer ends with the exact mean, for every size, line and chunking") {
  const std::size_t unlimited = std::numeric_limits<std::size_t>::max();
  std::vector<Case> table;
  std::uint64_t seed = 1;
  for (std::size_t n : {0, 1, 3, 4, 100, 1000, 10007}) {
    for (std::uint32_t p = 1; p <= 16; ++p) {
      for (std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{64}, std::size_t{1000}, unlimited}) {
        // Thousands of tiny messages add time, not coverage.
        if ((chunk == 1 && n > 100) || (chunk < 64 && n > 1000)) continue;
        for (Delivery d : {Delivery::in_order, Delivery::shuffled}) {
          for (Pattern pat : {Pattern::rank, Pattern::strided}) {
            // Timeout mode must also finish without a deadline when everyone delivers.
            const QuorumMode mode = (p + n) % 2 == 0 ? QuorumMode::fraction : QuorumMode::timeout;
            table.push_back({n, p, chunk, d, pat, mode});
          }
        }
      }
    }
  }
  // A million floats: a few line lengths only (each peer holds two copies of the model), with
  // chunks that do not divide the blocks.
  table.push_back({1'000'000, 1, 1 << 16, Delivery::in_order, Pattern::strided, QuorumMode::fraction});
  table.push_back({1'000'000, 3, 1 << 16, Delivery::in_order, Pattern::strided, QuorumMode::timeout});
  table.push_back({1'000'000, 16, 4'096, Delivery::shuffled, Pattern::strided, QuorumMode::fraction});

  for (const Case& c : table) {
    const std::string failure = run_exact(c, seed++);
    if (!failure.empty()) {
      CAPTURE(describe(c));
      CHECK(failure == "");
    }
  }
  CHECK(table.size() > 1000);
}

namespace {

struct LossyCase {
  std::size_t n;
  std::uint32_t p;
  std::size_t chunk;
  Delivery delivery;
  QuorumMode mode;
  double theta;
  double drop_rate;
};

std::string describe(const LossyCase& c) {
  std::ostringstream out;
  out << "n=" << c.n << " p=" << c.p << " chunk=" << c.chunk
      << (c.delivery == Delivery::in_order ? " in-order" : " shuffled")
      << (c.mode == QuorumMode::fraction ? " fraction" : " timeout") << " theta=" << c.theta
      << " drop=" << c.drop_rate;
  return out.str();
}

// Runs one lossy case to the end (deadline, then finish) and holds the invariants that survive
// losses: each reducer's mean is exactly the mean over the contributions it counted, with that
// count, and every peer that got a chunk got the reducer's values: the mean exactly where its contribution was not
// counted, else a delta that its contribution turns into the mean within a rounding.
std::string run_lossy(const LossyCase& c, std::uint64_t seed, std::size_t& short_means) {
  RoundConfig config;
  config.reduce_threshold = c.theta;
  config.complete_threshold = c.theta;
  config.quorum = c.mode;
  config.max_chunk_floats = c.chunk;
  SimulatedLine line(c.n, c.p, config);
  line.fill([](std::uint32_t rank, std::size_t index) { return value(Pattern::strided, rank, index); });
  line.run(c.delivery, seed, c.drop_rate);
  if (!line.all_complete()) return "a peer did not complete after finish()";
  const Partition& part = line.peer(0).partition();
  for (std::uint32_t k = 0; k < part.chunk_count(); ++k) {
    const Range r = part.chunk(k);
    const Round& reducer = line.peer(part.block_of(k));
    // finish() reduces every chunk that has any contribution, and the reducer's own always counts.
    if (reducer.count(k) == 0) return "chunk " + std::to_string(k) + " never reduced";
    if (reducer.count(k) != line.contributors(k).size()) return "chunk " + std::to_string(k) + " count";
    if (reducer.count(k) < c.p) ++short_means;
    for (std::size_t t = r.offset; t < r.end(); ++t) {
      if (reducer.result()[t] != line.expected_mean(k, t)) {
        return "chunk " + std::to_string(k) + " index " + std::to_string(t) + " is not the mean of its contributors";
      }
    }
    for (std::uint32_t i = 0; i < c.p; ++i) {
      const Round& peer = line.peer(i);
      if (peer.count(k) == 0 || i == part.block_of(k)) continue;
      if (peer.count(k) != reducer.count(k)) return "peer " + std::to_string(i) + " got another count";
      const auto& counted = line.contributors(k);
      const bool contributed = std::find(counted.begin(), counted.end(), i) != counted.end();
      if (peer.delta(k) != contributed) return "peer " + std::to_string(i) + " got a delta it should not, or no delta";
      for (std::size_t t = r.offset; t < r.end(); ++t) {
        const float mean = reducer.result()[t];
        if (!contributed && peer.result()[t] != mean) return "peer " + std::to_string(i) + " got other values";
        // s + float(mean - s) is within two roundings of the mean's magnitude or s's.
        const float held = mean_held(peer, t);
        const float scale = std::max(std::abs(mean), std::abs(peer.send_buffer()[t]));
        if (contributed && std::abs(held - mean) > 2 * std::numeric_limits<float>::epsilon() * scale)
          return "peer " + std::to_string(i) + " got another delta";
      }
    }
  }
  for (std::uint32_t i = 0; i < c.p; ++i) {
    const RoundCounters& counters = line.peer(i).counters();
    if (counters.missing_at_completion > part.chunk_count()) return "missing more chunks than there are";
    if (counters.malformed + counters.stale + counters.newer + counters.duplicate != 0) {
      return "peer " + std::to_string(i) + " saw a message the network never sent";
    }
  }
  return "";
}

}  // namespace

TEST_CASE("with messages lost, every mean is exactly the mean over the contributions counted, and peers agree") {
  std::uint64_t seed = 1000;
  std::size_t cases = 0;
  std::size_t short_means = 0;
  for (std::size_t n : {1, 5, 100, 10007}) {
    for (std::uint32_t p : {1u, 2u, 3u, 5u, 8u, 13u, 16u}) {
      for (std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{1000}}) {
        if (chunk == 1 && n > 100) continue;
        for (Delivery d : {Delivery::in_order, Delivery::shuffled}) {
          for (auto [mode, theta] : {std::pair{QuorumMode::fraction, 0.5}, std::pair{QuorumMode::timeout, 0.6},
                                     std::pair{QuorumMode::fraction, 1.0}}) {
            const double drop = seed % 2 == 0 ? 0.05 : 0.3;
            const LossyCase c{n, p, chunk, d, mode, theta, drop};
            const std::string failure = run_lossy(c, seed++, short_means);
            ++cases;
            if (!failure.empty()) {
              CAPTURE(describe(c));
              CHECK(failure == "");
            }
          }
        }
      }
    }
  }
  CHECK(cases > 300);
  CHECK(short_means > 500);  // the losses did bite: many means came from fewer than p

}
