#include <doctest/doctest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "grid/layout.hpp"
#include "grid/mixing.hpp"

using gridtrain::grid::Layout;
using gridtrain::grid::NodeId;
using gridtrain::grid::rounds_to_mean;

namespace {

// What layout.hpp states: every layout mixes to the mean (1e-6 of the initial spread, from ranks) within this many
// rounds per effective dimension. Measured worst: 20.5, on 4 x 4 with 10 nodes (2 of 4 layers whole).
constexpr int kRoundsPerDim = 21;

Layout grown(const std::function<Layout()>& make, int n) {
  Layout layout = make();
  for (NodeId node = 1; node <= static_cast<NodeId>(n); ++node) layout.add(node);
  return layout;
}

std::vector<double> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> value(-1000.0, 1000.0);
  std::vector<double> out(n);
  for (double& v : out) v = value(rng);
  return out;
}

}  // namespace

TEST_CASE("a full cube reaches the exact mean in one round per dimension, and not before") {
  struct Cube {
    std::function<Layout()> make;
    int n;
    std::vector<int> shape;
  };
  const std::vector<Cube> cubes = {
      {[] { return Layout::fixed(1); }, 5, {5}},          {[] { return Layout::fixed(2); }, 9, {3, 3}},
      {[] { return Layout::fixed(2); }, 16, {4, 4}},      {[] { return Layout::fixed(3); }, 27, {3, 3, 3}},
      {[] { return Layout::fixed(3); }, 64, {4, 4, 4}},   {[] { return Layout::fixed(4); }, 81, {3, 3, 3, 3}},
      {[] { return Layout::automatic(16); }, 256, {16, 16}},
  };
  for (const Cube& cube : cubes) {
    CAPTURE(cube.n);
    const Layout layout = grown(cube.make, cube.n);
    REQUIRE(layout.shape() == cube.shape);
    const int d = layout.dims();
    const auto from_ranks = rounds_to_mean(layout, 1e-12);
    CHECK(from_ranks.reached);
    CHECK(from_ranks.rounds <= d);  // fewer where ranks happen to balance a dimension's lines
    const auto from_random = rounds_to_mean(layout, random_values(layout.size(), 7), 1e-12);
    CHECK(from_random.reached);
    CHECK(from_random.rounds == d);
    if (d > 1) CHECK_FALSE(rounds_to_mean(layout, random_values(layout.size(), 7), 1e-12, d - 1).reached);
  }
}

TEST_CASE("rounds are counted until every node is within the tolerance of the initial spread") {
  const Layout layout = grown([] { return Layout::fixed(2); }, 10);  // 4 x 4, layers 0 and 1 whole, 2 partial
  REQUIRE(layout.shape() == std::vector<int>{4, 4});
  const auto fine = rounds_to_mean(layout, 1e-6);
  const auto coarse = rounds_to_mean(layout, 1e-2);
  CHECK(fine.reached);
  CHECK(coarse.reached);
  CHECK(coarse.rounds < fine.rounds);
  CHECK(fine.rounds <= kRoundsPerDim * 2);
  // The tolerance scales with the spread: the same values times 1000 need the same rounds.
  std::vector<double> ranks(10);
  for (std::size_t i = 0; i < ranks.size(); ++i) ranks[i] = 1000.0 * static_cast<double>(i);
  CHECK(rounds_to_mean(layout, ranks, 1e-6).rounds == fine.rounds);
  const auto capped = rounds_to_mean(layout, 1e-6, 3);
  CHECK_FALSE(capped.reached);
  CHECK(capped.rounds == 3);
  // No spread, or nobody to average with: nothing to do.
  CHECK(rounds_to_mean(layout, std::vector<double>(10, 4.0)).rounds == 0);
  const Layout one = grown([] { return Layout::fixed(3); }, 1);
  CHECK(rounds_to_mean(one).reached);
  CHECK(rounds_to_mean(one).rounds == 0);
}

// The statement of layout.hpp, held over every n <= 300 and every 7th n up to 4096 of clusters grown one join at a
// time (bench_grid_moves and the property test add random churn).
TEST_CASE("every layout a cluster grows through mixes within 21 rounds per effective dimension") {
  const std::vector<std::pair<std::string, std::function<Layout()>>> policies = {
      {"d=1", [] { return Layout::fixed(1); }}, {"d=2", [] { return Layout::fixed(2); }},
      {"d=3", [] { return Layout::fixed(3); }}, {"d=4", [] { return Layout::fixed(4); }},
      {"auto(16)", [] { return Layout::automatic(16); }}};
  for (const auto& [name, make] : policies) {
    Layout layout = make();
    int worst_n = 0;
    double worst = 0;
    for (NodeId node = 1; node <= 4096; ++node) {
      layout.add(node);
      if (node > 300 && node % 7 != 0) continue;
      const auto mixing = rounds_to_mean(layout, 1e-6, 1000);
      CAPTURE(name);
      CAPTURE(node);
      CHECK(mixing.reached);
      CHECK(mixing.rounds <= kRoundsPerDim * layout.dims());
      const double per_dim = static_cast<double>(mixing.rounds) / layout.dims();
      if (per_dim > worst) {
        worst = per_dim;
        worst_n = static_cast<int>(node);
      }
    }
    MESSAGE(name << ": at most " << worst << " rounds per dimension, at n = " << worst_n);
  }
}
