// How many nodes a join or leave moves in grid::Layout, how long it takes, and how fast its lines average.
//
// For each shape: grow one join at a time to N, churn (random joins and leaves) around N, shrink by random leaves
// to 0, then oscillate around a full cube to show the hysteresis. Prints one table row per shape and phase, then
// the effective shapes a cluster passes through while it grows (each change of dimensions moves everyone), then
// the rounds of line averaging (θ = α = 1) until every node is within 1e-6 of the initial spread from the mean,
// starting from each node's rank, for clusters grown one join at a time.
//
// A resize is compared with a lower bound that any balanced layout must pay:
//   shrink: every node outside the smaller cube must move;
//   grow:   the d new outer faces must hold their share, less the cells where two faces meet, less the one cell
//           the joining node fills.
//
// Usage: bench_grid_moves [N] [churn operations]   (defaults: 5000 20000)

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "grid/layout.hpp"
#include "grid/mixing.hpp"

namespace {

using gridtrain::grid::Layout;
using gridtrain::grid::LayoutDelta;
using gridtrain::grid::NodeId;
using Clock = std::chrono::steady_clock;

struct Stat {
  std::uint64_t count = 0;
  double sum = 0;
  double max = 0;
  void add(double v) {
    ++count;
    sum += v;
    max = std::max(max, v);
  }
  double mean() const { return count == 0 ? 0 : sum / static_cast<double>(count); }
};

struct Phase {
  Stat join_moves, leave_moves;             // operations that kept the shape
  Stat resize_moves, resize_fraction;       // resizes that kept d
  double resize_bound = 0;                  // summed lower bounds of those resizes
  Stat redim_moves;                         // changes of d (automatic): everyone moves
  Stat add_us, remove_us;                   // wall time per call
  Stat starts, stops;                       // start_line and stop_line messages per operation
};

std::uint64_t power(std::uint64_t b, int e) {
  std::uint64_t r = 1;
  for (int i = 0; i < e; ++i) r *= b;
  return r;
}

// The fewest nodes the d new faces of a cube of side s must hold when it holds n, balanced.
double grow_bound(std::uint64_t n, int d, int s) {
  if (s < 2) return 0;
  const std::uint64_t per = power(static_cast<std::uint64_t>(s), d - 1);
  const double face = static_cast<double>(power(static_cast<std::uint64_t>(s), d - 2) * (n / per));
  const double meet =
      d == 2 ? 1.0 : static_cast<double>(power(static_cast<std::uint64_t>(s), d - 3) * ((n + per - 1) / per));
  return std::max(0.0, d * face - d * (d - 1) / 2.0 * meet - 1.0);
}

class Driver {
 public:
  explicit Driver(Layout layout) : layout_(std::move(layout)), dims_(layout_.dims()) {}

  void add(NodeId node, Phase& phase) {
    const auto start = Clock::now();
    const LayoutDelta delta = layout_.add(node);
    phase.add_us.add(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    account(delta, node, /*joined=*/true, phase);
    present_.push_back(node);
  }

  void remove_at(std::size_t at, Phase& phase) {
    const NodeId node = present_[at];
    present_[at] = present_.back();
    present_.pop_back();
    const auto start = Clock::now();
    const LayoutDelta delta = layout_.remove(node);
    phase.remove_us.add(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    account(delta, node, /*joined=*/false, phase);
  }

  std::size_t size() const { return present_.size(); }
  const Layout& layout() const { return layout_; }

 private:
  void account(const LayoutDelta& delta, NodeId node, bool joined, Phase& phase) {
    phase.starts.add(static_cast<double>(delta.started.size()));
    phase.stops.add(static_cast<double>(delta.stopped.size()));
    const double moves = static_cast<double>(delta.moved.size());
    const std::size_t before = coords_.size();
    if (!delta.reshaped || (layout_.dims() == 1 && dims_ == 1)) {
      (joined ? phase.join_moves : phase.leave_moves).add(moves);
    } else if (layout_.dims() != dims_) {
      phase.redim_moves.add(moves);
    } else {
      const std::uint64_t n = layout_.size();
      double bound = 0;
      if (layout_.side() > side_) {
        bound = grow_bound(n, layout_.dims(), layout_.side());
      } else {
        for (const auto& [other, x] : coords_) {
          if (other != node && std::any_of(x.begin(), x.end(), [&](int c) { return c >= layout_.side(); })) ++bound;
        }
      }
      phase.resize_moves.add(moves);
      phase.resize_fraction.add(moves / static_cast<double>(std::max<std::size_t>(before, 1)));
      phase.resize_bound += bound;
    }
    if (joined) {
      coords_[node] = layout_.coords(node);
    } else {
      coords_.erase(node);
    }
    for (NodeId other : delta.moved) coords_[other] = layout_.coords(other);
    dims_ = layout_.dims();
    side_ = layout_.side();
  }

  Layout layout_;
  std::vector<NodeId> present_;
  std::map<NodeId, std::vector<int>> coords_;  // as the deltas left them
  int dims_;
  int side_ = 0;
};

void header() {
  std::printf("%-9s %-9s %7s | %-13s | %-13s | %4s %-13s %-13s %6s | %4s %7s | %-11s %-11s | %5s %5s\n", "shape",
              "phase", "ops", "join moves", "leave moves", "rsz", "resize moves", "resize/n", "vs LB", "redim",
              "moves", "add us", "remove us", "start", "stop");
  std::printf("%-9s %-9s %7s | %-13s | %-13s | %4s %-13s %-13s %6s | %4s %7s | %-11s %-11s | %5s %5s\n", "", "", "",
              "mean   max", "mean   max", "n", "mean   max", "mean   max", "", "n", "mean", "mean  max",
              "mean  max", "/op", "/op");
}

void row(const std::string& shape, const std::string& name, const Phase& p) {
  const double ops = static_cast<double>(p.add_us.count + p.remove_us.count);
  const double lb_ratio = p.resize_bound > 0 ? p.resize_moves.sum / p.resize_bound : 0;
  std::printf(
      "%-9s %-9s %7.0f | %5.3f %6.0f | %5.3f %6.0f | %4llu %6.1f %6.0f %6.3f %6.3f %6.2f | %4llu %7.0f | %5.2f %5.0f "
      "%5.2f %5.0f | %5.2f %5.2f\n",
      shape.c_str(), name.c_str(), ops, p.join_moves.mean(), p.join_moves.max, p.leave_moves.mean(), p.leave_moves.max,
      static_cast<unsigned long long>(p.resize_moves.count), p.resize_moves.mean(), p.resize_moves.max,
      p.resize_fraction.mean(), p.resize_fraction.max, lb_ratio, static_cast<unsigned long long>(p.redim_moves.count),
      p.redim_moves.mean(), p.add_us.mean(), p.add_us.max, p.remove_us.mean(), p.remove_us.max, p.starts.mean(),
      p.stops.mean());
}

std::string shape_text(const Layout& layout) {
  return std::to_string(layout.side()) + "^" + std::to_string(layout.dims());
}

// Where the effective dimensions change while a cluster grows one join at a time to n_max.
void dims_changes(const std::string& name, const std::function<Layout()>& make, std::size_t n_max) {
  Layout layout = make();
  std::string line;
  int changes = 0;
  std::uint64_t moved = 0;
  int dims = 0;
  for (NodeId node = 1; node <= n_max; ++node) {
    const LayoutDelta delta = layout.add(node);
    if (layout.dims() == dims) continue;
    if (dims != 0) {
      ++changes;
      moved += delta.moved.size();
    }
    dims = layout.dims();
    line += " " + std::to_string(node) + ":" + shape_text(layout);
  }
  std::printf("%-9s %2d changes, %6llu moves |%s\n", name.c_str(), changes, static_cast<unsigned long long>(moved),
              line.c_str());
}

// One row per table: `name`, then one cell per size of `width` characters.
std::string table_row(const std::string& name, const std::vector<std::string>& cells, int width) {
  char text[64];
  std::snprintf(text, sizeof text, "%-9s |", name.c_str());
  std::string out = text;
  for (const std::string& cell : cells) {
    std::snprintf(text, sizeof text, " %*s", width, cell.c_str());
    out += text;
  }
  return out;
}

// Rounds to the mean ("!" where not reached) and the effective shape at each of `sizes`, for a cluster grown one
// join at a time.
void mixing_cells(const std::function<Layout()>& make, const std::vector<std::size_t>& sizes,
                  std::vector<std::string>& rounds, std::vector<std::string>& shapes) {
  Layout layout = make();
  std::size_t n = 0;
  for (const std::size_t size : sizes) {
    while (n < size) layout.add(++n);
    const gridtrain::grid::Mixing mixing = gridtrain::grid::rounds_to_mean(layout, 1e-6, 10000);
    rounds.push_back(std::to_string(mixing.rounds) + (mixing.reached ? "" : "!"));
    shapes.push_back(shape_text(layout));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n_max = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 5000;
  const std::size_t churn = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 20000;
  const std::vector<std::pair<std::string, std::function<Layout()>>> shapes = {
      {"d=1", [] { return Layout::fixed(1); }},       {"d=2", [] { return Layout::fixed(2); }},
      {"d=3", [] { return Layout::fixed(3); }},       {"d=4", [] { return Layout::fixed(4); }},
      {"d=6", [] { return Layout::fixed(6); }},       {"auto(16)", [] { return Layout::automatic(16); }}};

  std::printf("grid::Layout moves and timings: grow to n = %zu, %zu churn operations, shrink to 0\n", n_max, churn);
  std::printf("moves: nodes other than the joining/leaving one whose coordinates changed; rsz: resizes keeping d;\n");
  std::printf("vs LB: resize moves / lower bound summed over resizes; redim: changes of d (everyone moves)\n\n");
  header();
  for (const auto& [name, make] : shapes) {
    Driver driver(make());
    std::mt19937_64 rng(1);
    NodeId next = 1;
    Phase grow, mixed, shrink, oscillate;
    while (driver.size() < n_max) driver.add(next++, grow);
    for (std::size_t i = 0; i < churn; ++i) {
      if (rng() % 2 == 0) {
        driver.add(next++, mixed);
      } else {
        driver.remove_at(rng() % driver.size(), mixed);
      }
    }
    while (driver.size() > 0) driver.remove_at(rng() % driver.size(), shrink);

    // Oscillate between s^d - 2 and s^d + 2 around the largest full cube up to n_max; for auto(16), around
    // 16^3, where it changes from 3 to 4 dimensions.
    const int d = name == "auto(16)" ? 3 : std::stoi(name.substr(2));
    std::uint64_t s = name == "auto(16)" ? 16 : 1;
    while (name != "auto(16)" && power(s + 1, d) <= n_max) ++s;
    const std::uint64_t full = power(s, d);
    Driver around(make());
    Phase warm;
    while (around.size() < full - 2) around.add(next++, warm);
    for (int i = 0; i < 1000; ++i) {
      for (int j = 0; j < 4; ++j) around.add(next++, oscillate);
      for (int j = 0; j < 4; ++j) around.remove_at(rng() % around.size(), oscillate);
    }
    row(name, "grow", grow);
    row(name, "churn", mixed);
    row(name, "shrink", shrink);
    row(name, "s^d+-2", oscillate);
  }

  std::printf("\nEffective shapes while growing to n = %zu, one join at a time: n:side^dims where dims change\n",
              n_max);
  for (const auto& [name, make] : shapes) dims_changes(name, make, n_max);

  std::vector<std::size_t> sizes;
  std::vector<std::string> columns;
  for (std::size_t n = 2; n <= 16; ++n) sizes.push_back(n);
  for (const std::size_t n : {64, 256, 1024, 4096}) sizes.push_back(n);
  for (const std::size_t n : sizes) columns.push_back(std::to_string(n));
  std::vector<std::string> round_rows = {table_row("n", columns, 4)}, shape_rows = {table_row("n", columns, 6)};
  for (const auto& [name, make] : shapes) {
    if (name == "d=6") continue;  // the table the tests hold: d <= 4 and auto(16)
    std::vector<std::string> rounds, shape;
    mixing_cells(make, sizes, rounds, shape);
    round_rows.push_back(table_row(name, rounds, 4));
    shape_rows.push_back(table_row(name, shape, 6));
  }
  std::printf("\nRounds until every node is within 1e-6 of the initial spread from the mean ");
  std::printf("(from ranks; !: not reached)\n");
  for (const std::string& line : round_rows) std::printf("%s\n", line.c_str());
  std::printf("\nEffective shape (side^dims) of those layouts\n");
  for (const std::string& line : shape_rows) std::printf("%s\n", line.c_str());
  return 0;
}
