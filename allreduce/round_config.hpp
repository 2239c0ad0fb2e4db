#pragma once
// RoundConfig: how a line's allreduce rounds run. Every member of a line must run them alike, so the cluster's
// config decides (the YAML section `allreduce`, read into config::AllreduceConfig, which is a RoundConfig) and
// the GridMaster ships it whole in every StartLine. This is the one home of these settings: their defaults,
// their bounds and their validation; the config schema and the actors both use them.

#include <cstdint>

#include "allreduce/outer_step.hpp"
#include "allreduce/quorum.hpp"
#include "allreduce/wire_codec.hpp"
#include "base/range.hpp"
#include "base/result.hpp"

namespace gridtrain::allreduce {

// Every threshold (θr, θc, θa) and the elastic rate α lie in (0, 1]: a share of 0 would wait for nobody (BIDMach
// could compute such a quorum and move on with nothing), and α = 0 would average for nothing.
inline constexpr NumberRange kFractionRange{0, 1, true, false};
// max_chunk_floats: a chunk holds at least one float; its length travels in 32 bits.
inline constexpr IntRange kChunkFloatsRange{1, std::numeric_limits<int>::max()};
// quorum_timeout_ms: 0 only when the quorum mode is fraction (validate() checks the pair).
inline constexpr IntRange kQuorumTimeoutRange{0, std::numeric_limits<int>::max()};
// k, the rounds a line may have in flight (BIDMach: 3). Each one is a Round (allreduce/round.hpp) holding O(N)
// floats on every member, so k is bounded.
inline constexpr IntRange kRoundsInFlightRange{1, 16};
// The outer step's rate: above 0; at most 2, beyond which it overshoots the mean by more than it moved.
inline constexpr NumberRange kOuterRateRange{0, 2, true, false};
// The outer momentum: [0, 1), as any momentum.
inline constexpr NumberRange kOuterMomentumRange{0, 1, false, true};

// What a node does with a round's mean (allreduce/elastic_update.hpp, allreduce/outer_step.hpp).
enum class OuterMode : std::uint8_t {
  elastic,   // m <- m + α·(mean - fetched)
  nesterov,  // DiLoCo's outer step: SGD with Nesterov momentum on the pseudo-gradient (outer - mean)
};

// The defaults serve a user whose nodes may be slow or stall: timeout quorum waits for every peer, so a healthy
// line averages exactly as with θ = 1; a peer that has not answered within quorum_timeout_ms is left out of that
// round, with half the line as the quorum. Half, not more: ceil(0.75·p) = p for lines of 2 or 3, which would
// stall them. A stalled or dead peer costs its line at most the deadline per round, until the failure detector
// (cluster.connection_timeout_ms) takes it out of the grid and the line runs at full speed without it.
struct RoundConfig {
  double reduce_threshold = 0.5;    // θr: a chunk of our block is reduced once ceil(θr·p) peers contributed
  double complete_threshold = 0.5;  // θc: the round completes once ceil(θc·C) of its C chunks are in
  double advance_threshold = 0.5;   // θa: the LineMaster starts round r+1 once ceil(θa·p) peers finished round r
  QuorumMode quorum = QuorumMode::timeout;
  std::uint32_t quorum_timeout_ms = 200;  // timeout mode: how long to wait for everyone before a quorum suffices
  // The largest chunk one frame carries. 262,144 floats (1 MB), by measurement (BENCHMARKS.md, "Chunk size"): at
  // 64 MB between 2 processes it moved 1.14–1.18 GB/s against 0.92–1.07 with 65,536, and no size did worse.
  std::uint32_t max_chunk_floats = 262144;
  double elastic_rate = 0.3;               // α: m <- m + α·(mean - fetched)
  OuterMode outer = OuterMode::elastic;
  double outer_rate = 0.7;      // nesterov: η (DiLoCo's 0.7)
  double outer_momentum = 0.9;  // nesterov: μ (DiLoCo's 0.9)
  // How a round's chunks go on the wire (allreduce/wire_codec.hpp): fp32 as they are; bf16 or int8 compressed,
  // each node's contributions with error feedback, each mean encoded once by its owner, which applies the same
  // decoded floats as every peer. Every member of a line must use the same: a joiner with another is refused.
  WireFormat wire = WireFormat::fp32;

  OuterRates outer_rates() const { return {static_cast<float>(outer_rate), static_cast<float>(outer_momentum)}; }

  bool operator==(const RoundConfig&) const = default;
};

// Whether `config` can run, or why not. Errors name the YAML key ("allreduce.reduce_threshold") and say what
// was expected and found.
Status validate(const RoundConfig& config);

}  // namespace gridtrain::allreduce
