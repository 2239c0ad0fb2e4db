#include "allreduce/round_config.hpp"

#include <string>

namespace gridtrain::allreduce {

namespace {

Error out_of_range(const char* key, const std::string& expected, const std::string& found) {
  return Error{.key = std::string("allreduce.") + key, .message = "expected " + expected + ", found " + found};
}

}  // namespace

Status validate(const RoundConfig& c) {
  const struct {
    const char* key;
    double value;
  } fractions[] = {{"reduce_threshold", c.reduce_threshold},
                   {"complete_threshold", c.complete_threshold},
                   {"advance_threshold", c.advance_threshold},
                   {"elastic_rate", c.elastic_rate}};
  for (const auto& f : fractions)
    if (!kFractionRange.contains(f.value))
      return out_of_range(f.key, "a number " + kFractionRange.describe(), format_number(f.value));
  if (c.quorum != QuorumMode::fraction && c.quorum != QuorumMode::timeout)
    return out_of_range("quorum", "fraction or timeout", std::to_string(static_cast<int>(c.quorum)));
  if (!kQuorumTimeoutRange.contains(c.quorum_timeout_ms))
    return out_of_range("quorum_timeout_ms", "an integer " + kQuorumTimeoutRange.describe(),
                        std::to_string(c.quorum_timeout_ms));
  if (c.quorum == QuorumMode::timeout && c.quorum_timeout_ms == 0)
    return out_of_range("quorum_timeout_ms", "> 0 with allreduce.quorum timeout", "0");
  if (!kChunkFloatsRange.contains(c.max_chunk_floats))
    return out_of_range("max_chunk_floats", "an integer " + kChunkFloatsRange.describe(),
                        std::to_string(c.max_chunk_floats));
  if (c.outer != OuterMode::elastic && c.outer != OuterMode::nesterov)
    return out_of_range("outer", "elastic or nesterov", std::to_string(static_cast<int>(c.outer)));
  if (!kOuterRateRange.contains(c.outer_rate))
    return out_of_range("outer_rate", "a number " + kOuterRateRange.describe(), format_number(c.outer_rate));
  if (!kOuterMomentumRange.contains(c.outer_momentum))
    return out_of_range("outer_momentum", "a number " + kOuterMomentumRange.describe(),
                        format_number(c.outer_momentum));
  // A fraction quorum reduces at once with ceil(θr·p) contributions: at θr <= 0.5 a line of two reduces each chunk
  // of a node's block from its own model alone. The outer step skips such a mean (it is no line's move), so on the
  // grid's many two-node lines nesterov would rarely average at all. A timeout quorum waits for all first.
  if (c.outer == OuterMode::nesterov && c.quorum == QuorumMode::fraction && c.reduce_threshold <= 0.5)
    return out_of_range("outer",
                        "elastic with allreduce.quorum fraction and reduce_threshold " +
                            format_number(c.reduce_threshold) +
                            " (a line of two would reduce a chunk from one node's model alone, and nesterov skips "
                            "such means: set reduce_threshold above 0.5, or quorum timeout)",
                        "nesterov");
  return {};
}

}  // namespace gridtrain::allreduce
