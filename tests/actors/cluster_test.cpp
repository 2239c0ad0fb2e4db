// In-process clusters: many Nodes in one actor system, through the same actors as separate processes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "cluster_harness.hpp"

namespace gridtrain::testing {
namespace {

using Lines = std::vector<std::vector<std::uint64_t>>;

// The grid's lines in dimension `dim`, from the coordinates in the status: nodes that agree on every other one.
Lines lines_of(const actors::GridView& status, std::uint32_t dim) {
  std::map<std::vector<std::int32_t>, std::vector<std::uint64_t>> lines;
  for (const auto& n : status.nodes) {
    auto key = n.place.coords;
    key.erase(key.begin() + dim);
    lines[key].push_back(n.place.node_id);
  }
  Lines out;
  for (auto& [key, members] : lines) out.push_back(members);
  return out;
}

std::uint64_t rounds_in(const actors::NodeHandle& node, std::uint32_t dim) {
  return node.stats().dims.at(dim).rounds.rounds_done;
}

std::uint64_t rounds_total(const actors::NodeHandle& node) { return node.stats().total().rounds_done; }

// The round's arithmetic, replayed: the mean of a chunk is the double sum of the floats received, divided by
// their count, rounded to float once; with α = 1 the elastic update replaces the value by it.
void apply_line_means(std::map<std::uint64_t, std::vector<float>>& values, const Lines& lines) {
  for (const auto& line : lines) {
    if (line.size() < 2) continue;
    const std::size_t n = values.at(line.front()).size();
    std::vector<float> mean(n);
    for (std::size_t j = 0; j < n; ++j) {
      double sum = 0;
      for (auto id : line) sum += values.at(id)[j];
      mean[j] = static_cast<float>(sum / static_cast<double>(line.size()));
    }
    for (auto id : line) values.at(id) = mean;
  }
}

// Waits until every node in a line of two or more has finished `rounds` rounds in `dim`.
void wait_for_rounds(TestCluster& cluster, const Lines& lines, std::uint32_t dim, std::uint64_t rounds) {
  for (const auto& line : lines) {
    if (line.size() < 2) continue;
    for (auto id : line) {
      for (auto& node : cluster.nodes()) {
        if (node.id() != id) continue;
        REQUIRE_MESSAGE(eventually([&] { return rounds_in(node, dim) >= rounds; }),
                        "node " << id << " did not finish round " << rounds << " of dim " << dim);
      }
    }
  }
}

// n nodes; one round in each dimension in turn (the rounds of one dimension must not overlap the next's, or
// "the line's mean" depends on timing). After each, every node must hold exactly its line's mean.
void check_exact_line_means(int dims, int n, int floats) {
  TestCluster cluster(cluster_config(dims, 1.0));
  std::map<std::uint64_t, std::vector<float>> expected;
  for (int i = 1; i <= n; ++i) {
    auto& node = cluster.add(static_cast<std::uint64_t>(i), make_store(floats, 10.0f * i), true);
    expected[node.id()] = read(*node.store());
  }
  const auto status = cluster.status();
  REQUIRE(status.nodes.size() == static_cast<std::size_t>(n));
  REQUIRE(status.dims == static_cast<std::uint32_t>(dims));
  for (std::uint32_t dim = 0; dim < status.dims; ++dim) {
    const Lines lines = lines_of(status, dim);
    for (auto& node : cluster.nodes()) node.allow_rounds(dim, 1);
    wait_for_rounds(cluster, lines, dim, 1);
    apply_line_means(expected, lines);
    for (auto& node : cluster.nodes()) {
      CAPTURE(node.id());
      CAPTURE(dim);
      CHECK(read(*node.store()) == expected.at(node.id()));
      CHECK(rounds_in(node, dim) <= 1);  // the every_steps budget held: exactly one round
    }
  }
}

double max_distance_to(const std::vector<float>& values, const std::vector<double>& target) {
  double worst = 0;
  for (std::size_t j = 0; j < values.size(); ++j) worst = std::max(worst, std::abs(values[j] - target[j]));
  return worst;
}

std::vector<double> global_mean(TestCluster& cluster) {
  std::vector<double> mean;
  const auto live = cluster.live();
  for (const auto& node : live) {
    const auto v = read(*node.store());
    mean.resize(v.size(), 0.0);
    for (std::size_t j = 0; j < v.size(); ++j) mean[j] += v[j];
  }
  for (double& x : mean) x /= static_cast<double>(live.size());
  return mean;
}

// The largest difference between any two live nodes, over every float.
double spread(TestCluster& cluster) {
  std::vector<float> lo, hi;
  for (const auto& node : cluster.live()) {
    const auto v = read(*node.store());
    if (lo.empty()) {
      lo = hi = v;
      continue;
    }
    for (std::size_t j = 0; j < v.size(); ++j) {
      lo[j] = std::min(lo[j], v[j]);
      hi[j] = std::max(hi[j], v[j]);
    }
  }
  double worst = 0;
  for (std::size_t j = 0; j < lo.size(); ++j) worst = std::max(worst, static_cast<double>(hi[j] - lo[j]));
  return worst;
}

// α = 0.5, one dimension at a time (so that each line round keeps its line's sum, and so the global mean), until
// every node is within 1e-5 of the starting global mean.
void check_convergence_to_global_mean(int dims, int n) {
  TestCluster cluster(cluster_config(dims, 0.5));
  // Small values: float rounding of the running updates stays well below the 1e-5 asked for.
  for (int i = 1; i <= n; ++i) cluster.add(static_cast<std::uint64_t>(i), make_store(100, 0.25f * i), true);
  const std::vector<double> target = global_mean(cluster);
  const auto status = cluster.status();
  bool converged = false;
  for (std::uint64_t sweep = 1; sweep <= 200 && !converged; ++sweep) {
    for (std::uint32_t dim = 0; dim < status.dims; ++dim) {
      for (auto& node : cluster.nodes()) node.allow_rounds(dim, 1);
      wait_for_rounds(cluster, lines_of(status, dim), dim, sweep);
    }
    converged = true;
    for (auto& node : cluster.nodes()) converged = converged && max_distance_to(read(*node.store()), target) < 1e-5;
  }
  CHECK(converged);
}

}  // namespace

TEST_CASE("4 nodes in 2-D: one round per dimension leaves every node exactly its line's mean") {
  check_exact_line_means(2, 4, 101);
}

TEST_CASE("9 nodes in 2-D: one round per dimension leaves every node exactly its line's mean") {
  check_exact_line_means(2, 9, 101);
}

TEST_CASE("27 nodes in 3-D: one round per dimension leaves every node exactly its line's mean") {
  check_exact_line_means(3, 27, 64);
}

TEST_CASE("7 nodes in a ragged 2-D grid: one round per dimension leaves every node exactly its line's mean") {
  {
    // The grid is ragged: 7 nodes on a 3 x 3 grid leave some lines short.
    TestCluster cluster(cluster_config(2, 1.0));
    for (int i = 1; i <= 7; ++i) cluster.add(static_cast<std::uint64_t>(i), make_store(10, 1.0f * i), true);
    const auto status = cluster.status();
    CHECK(status.shape == std::vector<std::int32_t>{3, 3});
    const Lines lines = lines_of(status, 0);
    CHECK(std::any_of(lines.begin(), lines.end(), [](const auto& l) { return l.size() == 2; }));
  }
  check_exact_line_means(2, 7, 101);
}

TEST_CASE("with α = 0.5 and rounds dimension by dimension, every node converges to the global mean") {
  SUBCASE("9 nodes in 2-D") { check_convergence_to_global_mean(2, 9); }
  SUBCASE("7 nodes in a ragged 2-D grid") { check_convergence_to_global_mean(2, 7); }
  SUBCASE("27 nodes in 3-D") { check_convergence_to_global_mean(3, 27); }
}

TEST_CASE("with α = 0.5 and rounds running freely in every dimension, the nodes reach one value") {
  // Rounds of different dimensions overlap here: a line's update lands on values another dimension has moved
  // since the fetch. The update adds alpha * (mean - fetched), which keeps such moves and the sum of a round every
  // peer applies, but nodes joining while rounds already run can still apply a round unevenly. What must hold is
  // consensus.
  TestCluster cluster(cluster_config(2, 0.5));
  for (int i = 1; i <= 9; ++i) cluster.add(static_cast<std::uint64_t>(i), make_store(100, 0.25f * i));
  CHECK(eventually([&] { return spread(cluster) < 1e-5; }));
}

TEST_CASE("nodes join, leave and die while rounds run; no round waits forever and the nodes still agree") {
  TestCluster cluster(cluster_config(2, 0.5));
  std::vector<std::uint64_t> ids;
  for (std::uint64_t i = 1; i <= 9; ++i) {
    cluster.add(i, make_store(100, 0.25f * static_cast<float>(i)));
    ids.push_back(i);
  }
  // Every live node goes on finishing rounds: none is stuck in a round that can never complete.
  auto all_progress = [&] {
    std::map<std::uint64_t, std::uint64_t> before;
    for (const auto& node : cluster.live()) before[node.id()] = rounds_total(node);
    for (const auto& node : cluster.live()) {
      const bool moved = eventually([&] { return rounds_total(node) >= before[node.id()] + 4; });
      CHECK_MESSAGE(moved, "node " << node.id() << " stopped finishing rounds");
    }
  };
  all_progress();

  SUBCASE("a joiner is placed and takes part") {
    cluster.add(10, make_store(100, 5.0f));
    ids.push_back(10);
    REQUIRE(cluster.wait_for_members(ids));
    const auto status = cluster.status();
    CHECK(status.shape == std::vector<std::int32_t>{4, 4});
    all_progress();
    CHECK(rounds_total(cluster.nodes().back()) > 0);

    cluster.stop(4);  // clean: Leave
    ids.erase(std::find(ids.begin(), ids.end(), 4));
    REQUIRE(cluster.wait_for_members(ids));
    all_progress();

    cluster.kill(6);  // a crash: the GridMaster sees it go down
    ids.erase(std::find(ids.begin(), ids.end(), 6));
    REQUIRE(cluster.wait_for_members(ids));
    all_progress();
  }
  SUBCASE("a line master dies mid-round") {
    const auto status = cluster.status();
    std::uint64_t master = 0;
    for (const auto& n : status.nodes)
      if (!n.place.masters.empty() && n.place.node_id != 1) master = n.place.node_id;  // node 1 hosts the GridMaster
    REQUIRE(master != 0);
    cluster.kill(master);
    ids.erase(std::find(ids.begin(), ids.end(), master));
    REQUIRE(cluster.wait_for_members(ids));
    all_progress();
  }
  CHECK(eventually([&] { return spread(cluster) < 1e-5; }));
}

}  // namespace gridtrain::testing

