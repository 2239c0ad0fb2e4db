#include "grid/mixing.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>

#include "base/check.hpp"

namespace gridtrain::grid {
namespace {

// One dimension's lines of two or more members, as runs of node indices: the members of line j are
// members[start[j]] .. members[start[j + 1] - 1].
struct Lines {
  std::vector<std::uint32_t> members;
  std::vector<std::uint32_t> start{0};
};

std::vector<Lines> index_lines(const Layout& layout) {
  const std::vector<NodeId> ids = layout.members();
  const auto index = [&ids](NodeId node) {
    return static_cast<std::uint32_t>(std::lower_bound(ids.begin(), ids.end(), node) - ids.begin());
  };
  std::vector<Lines> out(static_cast<std::size_t>(layout.dims()));
  for (int k = 0; k < layout.dims(); ++k) {
    for (std::uint64_t i = 0; i < layout.lines_per_dim(); ++i) {
      const LineState& line = layout.line(LineId{k, i});
      if (line.members.size() < 2) continue;
      for (const NodeId node : line.members) out[k].members.push_back(index(node));
      out[k].start.push_back(static_cast<std::uint32_t>(out[k].members.size()));
    }
  }
  return out;
}

}  // namespace

Mixing rounds_to_mean(const Layout& layout, std::vector<double> values, double tolerance, int max_rounds) {
  GRIDTRAIN_REQUIRE(values.size() == layout.size() && tolerance > 0 && max_rounds >= 0);
  Mixing result;
  if (values.size() < 2) {
    result.reached = true;
    return result;
  }
  const auto [low, high] = std::minmax_element(values.begin(), values.end());
  const double bound = tolerance * (*high - *low);
  const double mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  const auto near = [&] {
    return std::all_of(values.begin(), values.end(), [&](double v) { return std::abs(v - mean) <= bound; });
  };
  const std::vector<Lines> lines = index_lines(layout);
  for (;;) {
    result.reached = near();
    if (result.reached || result.rounds >= max_rounds) break;
    const Lines& dim = lines[static_cast<std::size_t>(result.rounds % layout.dims())];
    for (std::size_t j = 0; j + 1 < dim.start.size(); ++j) {
      double sum = 0;
      for (std::uint32_t m = dim.start[j]; m < dim.start[j + 1]; ++m) sum += values[dim.members[m]];
      const double line_mean = sum / static_cast<double>(dim.start[j + 1] - dim.start[j]);
      for (std::uint32_t m = dim.start[j]; m < dim.start[j + 1]; ++m) values[dim.members[m]] = line_mean;
    }
    ++result.rounds;
  }
  return result;
}

Mixing rounds_to_mean(const Layout& layout, double tolerance, int max_rounds) {
  std::vector<double> ranks(layout.size());
  std::iota(ranks.begin(), ranks.end(), 0.0);
  return rounds_to_mean(layout, std::move(ranks), tolerance, max_rounds);
}

}  // namespace gridtrain::grid
