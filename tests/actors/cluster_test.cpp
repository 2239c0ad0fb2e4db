// In-process clusters: many Nodes in one actor system, through the same actors as separate processes, run
// deterministically, message by message.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "actors/dimension_node.hpp"
#include "actors/line_master.hpp"
#include "deterministic_cluster.hpp"
#include "test_support.hpp"

namespace gridtrain::testing {
namespace {

using Lines = std::vector<std::vector<std::uint64_t>>;

// Far more messages than a test here needs (the free-running rounds of ten nodes agree to 1e-5 within some 10^4):
// reaching it means that a round waits forever, not that the run was slow.
constexpr std::size_t kMaxEvents = 1'000'000;

// The conditions of the free-running tests read every node's store or counters: they are asked after every so many
// messages, not after each.
constexpr std::size_t kCheckEvery = 16;

// The interleavings a test runs under: 0 takes the actors in line, any other number is the seed of a random
// order (DeterministicSystem::shuffle). Each is the same on every run.
const std::vector<std::uint64_t> kInterleavings{0, 1, 2, 3};

void interleave(DeterministicCluster& cluster, std::uint64_t seed) {
  if (seed != 0) cluster.sim().shuffle(seed);
}

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

// The size of the line of node `id`.
std::size_t line_size(const Lines& lines, std::uint64_t id) {
  for (const auto& line : lines)
    if (std::find(line.begin(), line.end(), id) != line.end()) return line.size();
  FAIL("node " << id << " is in no line");
  return 0;
}

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

// Allows every node one round in `dim` and runs until the cluster is idle: paced, every line of two or more
// runs exactly that one round, and nothing follows.
void one_round_in(DeterministicCluster& cluster, std::uint32_t dim) {
  for (auto id : cluster.live())
    caf::anon_send(cluster.node(id), actors::allow_rounds_atom::value, dim, std::uint64_t{1});  // this dim only
  cluster.sim().run();
}

// n nodes; one round in each dimension in turn (the rounds of one dimension must not overlap the next's, or
// "the line's mean" depends on the order of messages). After each, every node must hold exactly its line's mean,
// and have run exactly one round in that dimension if its line has two or more members, none otherwise.
// `dims` is the grid's dimensions, the effective ones: the test picks an n whose layout uses them all.
void check_exact_line_means(int dims, int n, int floats, std::uint64_t seed) {
  CAPTURE(seed);
  DeterministicCluster cluster(cluster_config(dims, 1.0));
  interleave(cluster, seed);
  std::map<std::uint64_t, std::vector<float>> expected;
  for (int i = 1; i <= n; ++i) {
    const auto id = static_cast<std::uint64_t>(i);
    cluster.add(id, make_store(floats, 10.0f * i), true);
    expected[id] = read(*cluster.store(id));
  }
  cluster.sim().run();
  const auto status = cluster.status();
  REQUIRE(status.nodes.size() == static_cast<std::size_t>(n));
  REQUIRE(status.dims == static_cast<std::uint32_t>(dims));
  // Joins may leave counts behind (a StartLine of a layout version already replaced is dropped as stale when
  // two masters' messages cross); the rounds are checked against what the counters held before them.
  std::map<std::uint64_t, actors::RoundStats> before;
  for (auto id : cluster.live()) before[id] = cluster.stats(id).total();
  std::map<std::uint64_t, std::uint64_t> rounds;  // each node's, over the dimensions so far
  for (std::uint32_t dim = 0; dim < status.dims; ++dim) {
    const Lines lines = lines_of(status, dim);
    one_round_in(cluster, dim);
    apply_line_means(expected, lines);
    for (auto id : cluster.live()) {
      CAPTURE(id);
      CAPTURE(dim);
      CHECK(read(*cluster.store(id)) == expected.at(id));
      const std::uint64_t in_dim = line_size(lines, id) >= 2 ? 1 : 0;  // the every_steps budget held
      rounds[id] += in_dim;
      const actors::NodeStats stats = cluster.stats(id);
      CHECK(stats.dims.at(dim).rounds.rounds_done == in_dim);
      // Nothing dropped, caught up or cut short: the rounds ran whole, one dimension at a time.
      actors::RoundStats want = before.at(id);
      want += actors::RoundStats{.rounds_done = rounds[id]};
      // Bytes moved exactly when a round ran; how many depends on the node's block of its line.
      const actors::RoundStats got = stats.total();
      CHECK((got.bytes_sent > before.at(id).bytes_sent) == (rounds[id] > 0));
      CHECK((got.bytes_received > before.at(id).bytes_received) == (rounds[id] > 0));
      want.bytes_sent = got.bytes_sent;
      want.bytes_received = got.bytes_received;
      CHECK(got == want);
      CHECK(stats.bad_messages == 0);
    }
  }
}

// In every interleaving: the sum of a chunk is exact whatever the order its contributions arrive in.
void check_exact_line_means(int dims, int n, int floats) {
  for (std::uint64_t seed : kInterleavings) check_exact_line_means(dims, n, floats, seed);
}

double max_distance_to(const std::vector<float>& values, const std::vector<double>& target) {
  double worst = 0;
  for (std::size_t j = 0; j < values.size(); ++j) worst = std::max(worst, std::abs(values[j] - target[j]));
  return worst;
}

std::vector<double> global_mean(const DeterministicCluster& cluster) {
  std::vector<double> mean;
  const auto live = cluster.live();
  for (auto id : live) {
    const auto v = read(*cluster.store(id));
    mean.resize(v.size(), 0.0);
    for (std::size_t j = 0; j < v.size(); ++j) mean[j] += v[j];
  }
  for (double& x : mean) x /= static_cast<double>(live.size());
  return mean;
}

// The largest difference between any two live nodes, over every float.
double spread(const DeterministicCluster& cluster) {
  std::vector<float> lo, hi;
  for (auto id : cluster.live()) {
    const auto v = read(*cluster.store(id));
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
void check_convergence_to_global_mean(int dims, int n, std::uint64_t seed) {
  CAPTURE(seed);
  DeterministicCluster cluster(cluster_config(dims, 0.5));
  interleave(cluster, seed);
  // Small values: float rounding of the running updates stays well below the 1e-5 asked for.
  for (int i = 1; i <= n; ++i) cluster.add(static_cast<std::uint64_t>(i), make_store(100, 0.25f * i), true);
  cluster.sim().run();
  const std::vector<double> target = global_mean(cluster);
  const auto status = cluster.status();
  bool converged = false;
  std::uint64_t sweep = 0;
  while (sweep < 200 && !converged) {
    ++sweep;
    for (std::uint32_t dim = 0; dim < status.dims; ++dim) {
      one_round_in(cluster, dim);
      const Lines lines = lines_of(status, dim);
      for (auto id : cluster.live()) {
        CAPTURE(id);
        REQUIRE(cluster.rounds_in(id, dim) == (line_size(lines, id) >= 2 ? sweep : 0));
      }
    }
    converged = true;
    for (auto id : cluster.live()) converged = converged && max_distance_to(read(*cluster.store(id)), target) < 1e-5;
  }
  CHECK(converged);
  // Every node averaged with someone: the layout left nobody alone.
  for (auto id : cluster.live()) CHECK_MESSAGE(cluster.rounds_total(id) > 0, "node " << id << " ran no round");
}

void check_convergence_to_global_mean(int dims, int n) {
  for (std::uint64_t seed : kInterleavings) check_convergence_to_global_mean(dims, n, seed);
}

}  // namespace

TEST_CASE("16 nodes in 2-D: one round per dimension leaves every node exactly its line's mean") {
  check_exact_line_means(2, 16, 101);
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
    DeterministicCluster cluster(cluster_config(2, 1.0));
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

// What a user checks first: whatever the dimensions and however few nodes, nodes that join one after another all
// average, and their lines carry everyone to one mean (the layout's connectivity, through the real actors).
TEST_CASE("for d = 1..4 and n = 2..9, nodes joining one by one all run rounds and reach one mean") {
  for (int dims = 1; dims <= 4; ++dims) {
    for (int n = 2; n <= 9; ++n) {
      CAPTURE(dims);
      CAPTURE(n);
      check_convergence_to_global_mean(dims, n, static_cast<std::uint64_t>(dims * 10 + n));
    }
  }
}

// Nine nodes with rounds running freely in every dimension (α = 0.5), for the tests below.
struct FreeRunning {
  explicit FreeRunning(std::uint64_t seed) : cluster(cluster_config(2, 0.5)) {
    interleave(cluster, seed);
    for (std::uint64_t i = 1; i <= 9; ++i) {
      cluster.add(i, make_store(100, 0.25f * static_cast<float>(i)));
      ids.push_back(i);
    }
  }

  // Every live node goes on finishing rounds: none is stuck in a round that can never complete.
  void all_progress() {
    std::map<std::uint64_t, std::uint64_t> before;
    for (auto id : cluster.live()) before[id] = cluster.rounds_total(id);
    auto moved = [&](std::uint64_t id) { return cluster.rounds_total(id) >= before[id] + 4; };
    auto all_moved = [&] { return std::all_of(before.begin(), before.end(), [&](auto& b) { return moved(b.first); }); };
    cluster.sim().run_until(all_moved, kMaxEvents, kCheckEvery);
    for (auto id : cluster.live()) CHECK_MESSAGE(moved(id), "node " << id << " stopped finishing rounds");
  }

  // The GridMaster comes to list exactly `ids`, and says so when asked.
  void members_are_ids() {
    std::vector<std::uint64_t> expected = ids;
    std::sort(expected.begin(), expected.end());
    cluster.sim().run_until([&] { return cluster.members() == expected; }, kMaxEvents);
    REQUIRE(cluster.members() == expected);
    std::vector<std::uint64_t> listed;
    for (const auto& n : cluster.status().nodes) listed.push_back(n.place.node_id);
    CHECK(listed == expected);
  }

  void forget(std::uint64_t id) { ids.erase(std::find(ids.begin(), ids.end(), id)); }

  // The live nodes come to hold one value (to 1e-5).
  bool agree() { return cluster.sim().run_until([&] { return spread(cluster) < 1e-5; }, kMaxEvents, kCheckEvery); }

  DeterministicCluster cluster;
  std::vector<std::uint64_t> ids;
};

TEST_CASE("with α = 0.5 and rounds running freely in every dimension, the nodes reach one value") {
  // Rounds of different dimensions overlap here: a line's update lands on values another dimension has moved
  // since the fetch. The update adds alpha * (mean - fetched), which keeps such moves and the sum of a round every
  // peer applies, but nodes joining while rounds already run can still apply a round unevenly. What must hold is
  // consensus.
  for (std::uint64_t seed : kInterleavings) {
    CAPTURE(seed);
    FreeRunning f(seed);
    CHECK(f.agree());
    for (auto id : f.cluster.live()) CHECK(f.cluster.rounds_total(id) > 0);
  }
}

TEST_CASE("nodes join, leave and die while rounds run; no round waits forever and the nodes still agree") {
  SUBCASE("a joiner is placed and takes part; a node leaves cleanly; a node dies") {
    for (std::uint64_t seed : kInterleavings) {
      CAPTURE(seed);
      FreeRunning f(seed);
      f.all_progress();

      f.cluster.add(10, make_store(100, 5.0f));
      f.ids.push_back(10);
      f.members_are_ids();
      CHECK(f.cluster.status().shape == std::vector<std::int32_t>{4, 4});
      f.all_progress();
      CHECK(f.cluster.rounds_total(10) > 0);

      f.cluster.stop(4);  // clean: Leave
      f.forget(4);
      // A node that leaves ends only once the GridMaster has taken it out (it answers Leave then).
      CHECK(f.cluster.members() == f.ids);
      f.members_are_ids();
      f.all_progress();

      f.cluster.kill(6);  // a crash: the GridMaster sees it go down
      f.forget(6);
      f.members_are_ids();
      f.all_progress();
      CHECK(f.agree());
    }
  }
  SUBCASE("a line master dies mid-round") {
    for (std::uint64_t seed : kInterleavings) {
      CAPTURE(seed);
      FreeRunning f(seed);
      f.all_progress();
      std::uint64_t master = 0;
      std::uint32_t dim = 0;
      for (const auto& n : f.cluster.status().nodes) {
        if (n.place.masters.empty() || n.place.node_id == 1) continue;  // node 1 hosts the GridMaster
        master = n.place.node_id;
        dim = n.place.masters.front();
      }
      REQUIRE(master != 0);
      // Mid-round: its line has rounds started that not every peer has finished.
      const caf::actor line_master = f.cluster.state(master).line_masters.at(dim);
      REQUIRE(f.cluster.sim().run_until(
          [&] { return !state_of<actors::LineMasterState>(line_master).open.empty(); }, kMaxEvents));
      f.cluster.kill(master);
      f.forget(master);
      f.members_are_ids();
      f.all_progress();
      CHECK(f.agree());
    }
  }
}

TEST_CASE("a grid that shrinks to one dimension leaves no node a line in the other, nor a master without a line") {
  // 9 nodes in 3 x 3, then 4 of them gone (not node 1, which hosts the GridMaster): 5 nodes make one line. No line
  // starts in dimension 1 any more, so each node must end its own lines there; kept, their peers were dead nodes.
  for (std::uint64_t seed : kInterleavings) {
    CAPTURE(seed);
    FreeRunning f(seed);
    f.all_progress();
    REQUIRE(f.cluster.status().dims == 2);
    for (std::uint64_t id : {3, 5, 7, 9}) {
      f.cluster.kill(id);
      f.forget(id);
    }
    f.members_are_ids();
    const actors::GridView view = f.cluster.status();
    REQUIRE(view.dims == 1);
    f.all_progress();
    for (std::uint64_t id : f.cluster.live()) {
      CAPTURE(id);
      const actors::NodeState& node = f.cluster.state(id);
      const auto& dim1 = state_of<actors::DimensionNodeState>(node.dimension_nodes.at(1));
      CHECK((!dim1.line || dim1.line_lost));
      const auto placed = std::find_if(view.nodes.begin(), view.nodes.end(),
                                       [&](const auto& n) { return n.place.node_id == id; });
      REQUIRE(placed != view.nodes.end());
      for (std::uint32_t d = 0; d < actors::kDimsOffered; ++d) {
        const bool masters = std::count(placed->place.masters.begin(), placed->place.masters.end(), d) > 0;
        const auto& master = state_of<actors::LineMasterState>(node.line_masters.at(d));
        CHECK_MESSAGE(master.line.has_value() == masters, "dim " << d);
      }
    }
  }
}

}  // namespace gridtrain::testing
