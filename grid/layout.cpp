#include "grid/layout.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "base/check.hpp"
#include "grid/layer_choice.hpp"

// Why the layout is built this way:
//
// - Layers. The occupied cells are always whole layers plus part of at most one more ("the partial layer").
//   Every line holds one cell of every layer, so each line has (#whole layers) or one more: balanced. Any
//   subset of the partial layer will do, which is what makes joins and leaves cheap:
//   * a join takes the lowest free position of the partial layer (or opens the lowest empty layer): no move;
//   * a leave from the partial layer, or from a whole layer while there is no partial layer (that layer becomes
//     the partial one), moves no one;
//   * only a leave from a whole layer while another layer is partial moves one node from the partial layer into
//     the hole. We prefer a node on one of the hole's lines (one line fewer changes) that masters no line (no
//     stop_line), and fall back to the highest position.
// - Connectivity (nodes are adjacent when they share a line). Let L_t and L_u be whole layers with u = t + 1 mod s.
//   A node of L_u at position (x_0..x_{d-2}) shares its dimension-(d-1) line with the L_t node at the same position,
//   and its dimension-k line (k < d-1) with the L_t node at x_k + 1 (one step along dimension k changes the layer by
//   one). Alternating the two, a walk reaches from any L_t node the L_t node one step further along any dimension
//   k < d-1, so all of Z_s^(d-1): L_t and L_u are connected. Any other node's dimension-0 line holds an L_t cell,
//   occupied: everyone is connected, and has a partner. Without two whole layers some node may be alone (a layer
//   holds one cell per line), and two whole layers need not connect (t - u sharing a factor with s: layers 0 and 2
//   of side 4 split in two). So a cube (d >= 2) is used only while w >= 2 layers are whole, two of them consecutive
//   (mod s); d = 1 is one line of everybody. The whole layers change:
//   * on a join, only by the partial layer becoming whole: the pair stays;
//   * on a leave from a whole layer X with no partial layer: if every consecutive pair uses X, the hole is filled
//     from another whole layer Y that no remaining pair needs (w >= 3 here, as w - 1 >= 2), which becomes partial
//     instead: still at most one move;
//   * on a resize, which keeps the layers holding the most nodes among the sets with a consecutive pair.
// - Mixing. A full cube averages to the exact mean in d rounds (one per dimension). With w of s layers whole it is
//   slower the smaller w/s: in 2 dimensions with whole layers 0..w-1, two rounds multiply a mode of frequency k by
//   |F(k)|^2, F(k) = (1/w) sum_{t<w} e^(2 pi i t k / s), which is 0 for w = s, 1/(s-1)^2 for w = s - 1, and tends
//   to 1 as w/s does to 0; for w >= s/2 it is at most 1/2 (the worst: s = 4, w = 2). So a cube also needs
//   w >= s/2: then every layout measured reaches the mean (1e-6 of the initial spread, from ranks) within 21 rounds
//   per dimension, the worst being 4 x 4 with 10 nodes. Measured for every n <= 4096 grown by joins (fixed(1..6),
//   automatic(4) and (16)) and along random churn; mixing_test.cpp and the property test hold it on samples.
//   w >= 2 alone needs up to 23 rounds per dimension at d = 4 (n = 290 on 5^4) and 33 at d = 5 (n = 3126 on 6^5),
//   more as s grows, with lines as short as 2 nodes where the user asked for about n^(1/d).
// - Shapes. With w = floor(n / s^(d-1)) whole layers, a cube (d >= 2, side s) is valid for n when
//   max(2, ceil(s/2)) <= w, n <= s^d, and n > (s-1)^d - (s-1)^(d-1)/2 (the resize hysteresis below). d = 1 is
//   valid for every n >= 1. A shape's margin is half a layer of the next smaller cube, max(1, (s-1)^(d-1)/2); its
//   slack at n is how many leaves it survives, and how many joins unless a growth to side s+1 keeps the full margin
//   (then joins only resize). The policy ranks dimensions (fixed(D): D down to 1; automatic(m): the fewest whose
//   lines hold <= m nodes, then more, then fewer, whose lines exceed m: connectivity wins) and for each operation:
//   1. keeps a valid shape if its dimensions content the policy (fixed: D; automatic: lines within m and not
//      n <= m^(d-1)/2), or resizes it to the smallest side if that one is settled (slack >= margin/2);
//   2. else moves to better-ranked dimensions whose smallest cube is steady (slack >= margin), the best first;
//   3. else keeps a valid shape; else takes the best-ranked settled shape, else the best-ranked valid one.
//   A new shape starts with slack >= margin/2 (a better-ranked one only once steady, which it was not when the last
//   choice was made), so a change of dimensions, which moves everyone, is followed by at least half the new shape's
//   margin of operations before the next: measured over random runs, and held by the property test. Growing from 1
//   to 5000 nodes changes dimensions once with fixed(2) (at n = 7), 6 times with fixed(3), 13 with fixed(4);
//   bench_grid_moves counts them, and their moves, for every shape.
// - Resizing. Growth happens only when the cube is full, so every inner cell is occupied, and any choice of
//   layers in the bigger cube keeps the nodes on its inner cells: only the cells on the new outer faces must be
//   filled, about d*n/(s+1) nodes, which is also what balance forces. Shrinking keeps every node that sits in
//   the smaller cube on a chosen layer. Both use one rule: choose the layers that already hold the most nodes
//   (greedy is optimal for "whole layers plus one partial"; with the consecutive pair it is checked and else
//   repaired by trying every pair), keep those nodes, and move the rest into the free cells of the chosen layers.
//   bench_grid_moves measures resizes at 1.00-1.01x a lower bound on the moves that any balanced layout of the
//   new side needs for d <= 3, 1.06-1.08x for d = 4.
// - Hysteresis. A cube of side s shrinks only once n <= (s-1)^d - (s-1)^(d-1)/2, half a layer of the smaller
//   cube below its capacity; it grows when full. Joins and leaves oscillating around s^d therefore pay for a
//   resize (~d*n/s moves) at most once per ~n/(2s) operations: about 2d moves per operation in the worst case.
//   Automatic dimensions step down only at n <= max_line^(d-1) / 2, half of what d-1 dimensions hold.
// - d = 1 is one line of everybody. Nodes keep their coordinate for life, the side is the highest occupied
//   coordinate + 1, and a join takes the lowest free coordinate, so nobody ever moves.

namespace gridtrain::grid {
namespace {

constexpr std::uint64_t kSaturated = std::numeric_limits<std::uint64_t>::max();

std::uint64_t power(std::uint64_t base, int exp) {
  std::uint64_t r = 1;
  for (int i = 0; i < exp; ++i) {
    if (base != 0 && r > kSaturated / base) return kSaturated;
    r *= base;
  }
  return r;
}

// The smallest side whose cube holds n cells.
int ceil_root(std::uint64_t n, int dims) {
  if (n == 0) return 0;
  auto s = static_cast<std::uint64_t>(std::llround(std::pow(static_cast<double>(n), 1.0 / dims)));
  while (power(s, dims) < n) ++s;
  while (s > 1 && power(s - 1, dims) >= n) --s;
  return static_cast<int>(std::max<std::uint64_t>(s, 1));
}

// Half a layer of the next smaller cube below its capacity; see the hysteresis note above.
std::uint64_t shrink_below(int side, int dims) {
  if (side <= 1) return 0;
  const auto q = static_cast<std::uint64_t>(side - 1);
  return power(q, dims) - power(q, dims - 1) / 2;
}

// ---- shapes (the "Shapes" note above); d >= 2 unless said ----

// The fewest whole layers a cube of side s may have: two, to connect, and half of them, to mix.
std::uint64_t least_whole(int side) { return std::max<std::uint64_t>(2, (static_cast<std::uint64_t>(side) + 1) / 2); }

// The fewest nodes a cube of d dimensions and side s holds.
std::uint64_t fewest(int dims, int side) {
  return std::max(shrink_below(side, dims) + 1, least_whole(side) * power(static_cast<std::uint64_t>(side), dims - 1));
}

std::uint64_t margin(int dims, int side) {
  return std::max<std::uint64_t>(1, power(static_cast<std::uint64_t>(side - 1), dims - 1) / 2);
}

bool valid(int dims, int side, std::uint64_t n) {
  if (dims == 1) return n >= 1;
  return side >= 2 && n >= fewest(dims, side) && n <= power(static_cast<std::uint64_t>(side), dims);
}

// Operations the shape survives from n (valid there); kSaturated for d = 1, which survives any.
std::uint64_t slack(int dims, int side, std::uint64_t n) {
  if (dims == 1) return kSaturated;
  const std::uint64_t cells = power(static_cast<std::uint64_t>(side), dims);
  // Joins beyond a full cube only resize when the next side enters with its full margin.
  const bool grows = fewest(dims, side + 1) + margin(dims, side + 1) <= cells + 1;
  return std::min(n - fewest(dims, side), grows ? kSaturated : cells - n);
}

bool steady(int dims, int side, std::uint64_t n) {
  return valid(dims, side, n) && (dims == 1 || slack(dims, side, n) >= margin(dims, side));
}

bool settled(int dims, int side, std::uint64_t n) {
  return valid(dims, side, n) && (dims == 1 || slack(dims, side, n) >= (margin(dims, side) + 1) / 2);
}

// The smallest side of d dimensions that holds n; d = 1 holds n on n coordinates.
int smallest_side(int dims, std::uint64_t n) { return dims == 1 ? static_cast<int>(n) : ceil_root(n, dims); }

bool has(const std::vector<NodeId>& nodes, NodeId node) {
  return std::find(nodes.begin(), nodes.end(), node) != nodes.end();
}

std::vector<std::vector<LineState>> empty_lines(const Cube& cube) {
  std::vector<std::vector<LineState>> lines(cube.dims());
  for (int k = 0; k < cube.dims(); ++k) {
    lines[k].resize(cube.lines_per_dim());
    for (std::uint64_t i = 0; i < lines[k].size(); ++i) lines[k][i].id = LineId{k, i};
  }
  return lines;
}

}  // namespace

// Remembers the lines through the cells an add or remove touches, then turns them into the delta.
class Layout::Change {
 public:
  explicit Change(Layout& layout) : layout_(layout) {}

  void touch(std::uint64_t cell) {
    for (int k = 0; k < layout_.cube_.dims(); ++k) {
      const LineId id{k, layout_.cube_.line_index(cell, k)};
      const bool seen = std::any_of(before_.begin(), before_.end(), [&](const LineState& l) { return l.id == id; });
      if (!seen) before_.push_back(layout_.lines_[k][id.index]);
    }
  }

  LayoutDelta finish() {
    std::sort(before_.begin(), before_.end(), [](const LineState& a, const LineState& b) { return a.id < b.id; });
    for (const LineState& old : before_) {
      LineState& now = layout_.lines_[old.id.dim][old.id.index];
      layout_.refresh(now);
      if (!now.members.empty() && now != old) delta.started.push_back(now);
      if (!old.members.empty() && now.master != old.master) delta.stopped.emplace_back(old.id, old.master);
    }
    return std::move(delta);
  }

  LayoutDelta delta;

 private:
  Layout& layout_;
  std::vector<LineState> before_;
};

Layout::Layout(int fixed_dims, int max_line)
    : fixed_dims_(fixed_dims), max_line_(max_line), cube_(1, 0),
      lines_(empty_lines(cube_)) {}

Layout Layout::fixed(int dims) {
  GRIDTRAIN_REQUIRE(dims >= 1 && dims <= kMaxDims);
  return Layout(dims, 0);
}

Layout Layout::automatic(int max_line) {
  GRIDTRAIN_REQUIRE(max_line >= 2);
  return Layout(0, max_line);
}

std::vector<int> Layout::shape() const { return std::vector<int>(cube_.dims(), cube_.side()); }

std::vector<NodeId> Layout::members() const {
  std::vector<NodeId> out;
  out.reserve(cell_of_.size());
  for (const auto& [node, cell] : cell_of_) out.push_back(node);
  return out;
}

std::vector<Layout::Placement>::const_iterator Layout::find(NodeId node) const {
  const auto it = std::lower_bound(cell_of_.begin(), cell_of_.end(), Placement{node, 0});
  return it != cell_of_.end() && it->first == node ? it : cell_of_.end();
}

std::uint64_t Layout::cell_of(NodeId node) const {
  const auto it = find(node);
  GRIDTRAIN_REQUIRE(it != cell_of_.end());
  return it->second;
}

std::vector<int> Layout::coords(NodeId node) const {
  const Coords x = cube_.coords(cell_of(node));
  return std::vector<int>(x.begin(), x.begin() + cube_.dims());
}

LineId Layout::line_of(NodeId node, int dim) const { return LineId{dim, cube_.line_index(cell_of(node), dim)}; }

std::vector<LineState> Layout::lines() const {
  std::vector<LineState> out;
  for (const auto& dim : lines_) {
    for (const LineState& line : dim) {
      if (!line.members.empty()) out.push_back(line);
    }
  }
  return out;
}

// ---- policy ---------------------------------------------------------------------------------------------------

// The dimensions the policy ranks for n, best first; 1 always comes last or before fewer-than-needed ones.
std::vector<int> Layout::preferences(std::uint64_t n) const {
  std::vector<int> out;
  if (fixed_dims_ != 0) {
    for (int d = fixed_dims_; d >= 1; --d) out.push_back(d);
    return out;
  }
  int least = 1;
  while (least < kMaxDims && n > power(static_cast<std::uint64_t>(max_line_), least)) ++least;
  for (int d = least; d <= kMaxDims; ++d) out.push_back(d);
  for (int d = least - 1; d >= 1; --d) out.push_back(d);
  return out;
}

// Whether the policy keeps these dimensions for n without looking for better ones.
bool Layout::content(int dims, std::uint64_t n) const {
  if (fixed_dims_ != 0) return dims == fixed_dims_;
  const auto m = static_cast<std::uint64_t>(max_line_);
  const bool fits = dims == kMaxDims || n <= power(m, dims);
  return fits && (dims == 1 || n > power(m, dims - 1) / 2);
}

Layout::Shape Layout::shape_for(std::uint64_t n) const {
  if (n == 0) return Shape{1, 0};
  const Shape now{cube_.dims(), cube_.side()};
  const bool now_valid = now.side > 0 && valid(now.dims, now.side, n);
  if (content(now.dims, n)) {
    if (now_valid) return now;
    const Shape resized{now.dims, smallest_side(now.dims, n)};
    if (settled(resized.dims, resized.side, n)) return resized;
  }
  const std::vector<int> ranked = preferences(n);
  for (const int d : ranked) {
    if (d == now.dims) break;
    if (steady(d, smallest_side(d, n), n)) return Shape{d, smallest_side(d, n)};
  }
  if (now_valid) return now;
  for (const int d : ranked) {
    if (settled(d, smallest_side(d, n), n)) return Shape{d, smallest_side(d, n)};
  }
  for (const int d : ranked) {
    if (valid(d, smallest_side(d, n), n)) return Shape{d, smallest_side(d, n)};
  }
  return Shape{1, static_cast<int>(n)};  // not reached: d = 1 is ranked and valid
}

// Why the current shape is not one the policy keeps for n, or "".
std::string Layout::off_policy(std::uint64_t n) const {
  const int d = cube_.dims();
  if (n == 0) return d == 1 && cube_.side() == 0 ? "" : "empty layout with a shape";
  if (d >= 2 && !valid(d, cube_.side(), n)) {
    return "side " + std::to_string(cube_.side()) + " in " + std::to_string(d) + " dimensions is not valid for n = " +
           std::to_string(n);
  }
  if (content(d, n)) return "";
  for (const int better : preferences(n)) {
    if (better == d) break;
    if (steady(better, smallest_side(better, n), n)) {
      return std::to_string(better) + " dimensions are steady for n = " + std::to_string(n) + " but " +
             std::to_string(d) + " are used";
    }
  }
  return "";
}

// ---- add and remove -------------------------------------------------------------------------------------------

LayoutDelta Layout::add(NodeId node) {
  GRIDTRAIN_REQUIRE(node != kNoNode && !contains(node));
  const std::uint64_t n = cell_of_.size() + 1;
  const Shape target = shape_for(n);
  const bool full = cell_of_.size() == cube_.cells();
  if (target.dims == 1 && cube_.dims() == 1 && cube_.side() > 0) {
    if (full) {
      // One more coordinate at the end: nobody moves and the one line keeps its number, so no rebuild.
      cube_ = Cube(1, cube_.side() + 1);
      cell_node_.push_back(kNoNode);
      layer_count_.push_back(0);
    }
  } else if (target != Shape{cube_.dims(), cube_.side()}) {
    return reshape(target, node);
  }

  const std::uint64_t cell = join_cell();
  Change change(*this);
  change.touch(cell);
  place(node, cell);
  change.delta.reshaped = full;
  return change.finish();
}

LayoutDelta Layout::remove(NodeId node) {
  const auto it = cell_of_.begin() + (find(node) - cell_of_.cbegin());
  GRIDTRAIN_REQUIRE(it != cell_of_.end());
  const std::uint64_t hole = it->second;
  const std::uint64_t n = cell_of_.size() - 1;
  const Shape target = shape_for(n);
  const bool stays = n > 0 && (target.dims == 1 ? cube_.dims() == 1 : target == Shape{cube_.dims(), cube_.side()});
  if (!stays) {
    vacate(hole);
    cell_of_.erase(it);
    return reshape(target, kNoNode);
  }

  Change change(*this);
  change.touch(hole);
  // Chosen before the hole opens: the hole's layer is whole exactly when the partial layer is another one.
  const int hole_layer = cube_.layer(hole);
  const std::optional<int> from =
      partial_ >= 0 ? (partial_ != hole_layer ? std::optional<int>(partial_) : std::nullopt) : refill_layer(hole);
  const std::uint64_t source = from ? mover_cell(hole, *from) : hole;
  vacate(hole);
  cell_of_.erase(it);
  if (from) {
    change.touch(source);
    const NodeId mover = cell_node_[source];
    vacate(source);
    place(mover, hole);
    change.delta.moved.push_back(mover);
  }
  if (cube_.dims() == 1) {
    // Trailing free coordinates go away without moving anyone; lines keep their numbers.
    auto side = static_cast<std::uint64_t>(cube_.side());
    while (side > 0 && cell_node_[side - 1] == kNoNode) --side;
    if (side != static_cast<std::uint64_t>(cube_.side())) {
      cube_ = Cube(1, static_cast<int>(side));
      cell_node_.resize(side);
      layer_count_.resize(side);
      change.delta.reshaped = true;
    }
  }
  return change.finish();
}

std::uint64_t Layout::join_cell() const {
  const std::uint64_t per = cube_.lines_per_dim();
  if (partial_ >= 0) {
    for (std::uint64_t pos = 0; pos < per; ++pos) {
      const std::uint64_t cell = cube_.layer_cell(partial_, pos);
      if (cell_node_[cell] == kNoNode) return cell;
    }
  }
  for (int t = 0; t < cube_.side(); ++t) {
    if (layer_count_[t] == 0) return cube_.layer_cell(t, 0);
  }
  precondition_violated("join_cell on a full cube");
  return 0;
}

// With no partial layer, a leave makes the hole's whole layer the partial one, unless that layer is in every
// consecutive pair of whole layers: then the layer returned (if any) gives a node to fill the hole and becomes
// partial instead. It is one that no pair needs; the lowest whose node on the hole's lines masters nothing, if any.
std::optional<int> Layout::refill_layer(std::uint64_t hole) const {
  const int s = cube_.side();
  if (cube_.dims() == 1 || s < 3) return std::nullopt;
  const std::uint64_t per = cube_.lines_per_dim();
  const auto whole = [&](int t) { return layer_count_[static_cast<std::size_t>((t + s) % s)] == per; };
  int pairs = 0;
  for (int t = 0; t < s; ++t) pairs += whole(t) && whole(t + 1) ? 1 : 0;
  const auto pairs_without = [&](int t) { return pairs - (whole(t - 1) ? 1 : 0) - (whole(t + 1) ? 1 : 0); };
  const int hole_layer = cube_.layer(hole);
  if (pairs_without(hole_layer) > 0) return std::nullopt;
  std::optional<int> first;
  for (int t = 0; t < s; ++t) {
    if (t == hole_layer || !whole(t) || pairs_without(t) <= 0) continue;
    if (!masters_any(mover_cell(hole, t))) return t;
    if (!first) first = t;
  }
  return first;
}

// The node of layer `from` (the partial layer, or the one refill_layer chose) that fills a hole in a whole layer.
std::uint64_t Layout::mover_cell(std::uint64_t hole, int from) const {
  const int d = cube_.dims();
  const int s = cube_.side();
  const Coords h = cube_.coords(hole);
  int rest = h[d - 1];  // x_{d-1} - (x_0 + ... + x_{d-2}), the layer before reduction
  for (int k = 0; k + 1 < d; ++k) rest -= h[k];
  std::uint64_t fallback = kSaturated;
  for (int k = 0; k < d; ++k) {
    // The one cell of layer `from` on the hole's line in dimension k.
    const int x_k = k + 1 < d ? rest + h[k] - from : from - rest + h[k];
    const int x = ((x_k % s) + s) % s;
    const std::uint64_t cell = cube_.line_cell(k, cube_.line_index(hole, k), x);
    if (cell_node_[cell] == kNoNode) continue;
    if (!masters_any(cell)) return cell;
    if (fallback == kSaturated) fallback = cell;
  }
  if (fallback != kSaturated) return fallback;
  for (std::uint64_t pos = cube_.lines_per_dim(); pos-- > 0;) {
    const std::uint64_t cell = cube_.layer_cell(from, pos);
    if (cell_node_[cell] != kNoNode) return cell;
  }
  precondition_violated("mover_cell from an empty layer");
  return 0;
}

bool Layout::masters_any(std::uint64_t cell) const {
  for (int k = 0; k < cube_.dims(); ++k) {
    if (lines_[k][cube_.line_index(cell, k)].master == cell_node_[cell]) return true;
  }
  return false;
}

void Layout::place(NodeId node, std::uint64_t cell) {
  cell_node_[cell] = node;
  const auto it = std::lower_bound(cell_of_.begin(), cell_of_.end(), Placement{node, 0});
  if (it != cell_of_.end() && it->first == node) {
    it->second = cell;
  } else {
    cell_of_.insert(it, Placement{node, cell});
  }
  count_layer(cube_.layer(cell), +1);
}

void Layout::vacate(std::uint64_t cell) {
  cell_node_[cell] = kNoNode;
  count_layer(cube_.layer(cell), -1);
}

void Layout::count_layer(int layer, std::int64_t change) {
  layer_count_[layer] = static_cast<std::uint64_t>(static_cast<std::int64_t>(layer_count_[layer]) + change);
  const std::uint64_t count = layer_count_[layer];
  if (count != 0 && count != cube_.lines_per_dim()) {
    partial_ = layer;
  } else if (partial_ == layer) {
    partial_ = -1;
  }
}

void Layout::refresh(LineState& line) const {
  line.members.clear();
  for (int x = 0; x < cube_.side(); ++x) {
    const NodeId node = cell_node_[cube_.line_cell(line.id.dim, line.id.index, x)];
    if (node != kNoNode) line.members.push_back(node);
  }
  if (line.members.empty()) {
    line.master = kNoNode;
  } else if (!has(line.members, line.master)) {
    line.master = *std::min_element(line.members.begin(), line.members.end());
  }
}

// ---- resizing -------------------------------------------------------------------------------------------------

LayoutDelta Layout::reshape(Shape shape, NodeId added) {
  const int dims = shape.dims;
  const int side = shape.side;
  const Cube old_cube = cube_;
  const std::vector<NodeId> old_cells = std::move(cell_node_);
  std::vector<std::vector<LineState>> old_lines = std::move(lines_);
  const bool same_dims = dims == old_cube.dims();

  cube_ = Cube(dims, side);
  cell_node_.assign(cube_.cells(), kNoNode);
  layer_count_.assign(static_cast<std::size_t>(side), 0);
  partial_ = -1;
  const std::uint64_t per = cube_.lines_per_dim();
  const std::uint64_t n = cell_of_.size() + (added == kNoNode ? 0 : 1);

  // Where each remaining node lands if it keeps its coordinates (kSaturated: outside the new cube).
  struct Stay {
    NodeId node;
    std::uint64_t cell;
    int layer;
  };
  std::vector<Stay> stays;  // in old cell order, which fixes the order of everything below
  stays.reserve(cell_of_.size());
  std::vector<std::uint64_t> held(static_cast<std::size_t>(side), 0);
  for (std::uint64_t old = 0; old < old_cells.size(); ++old) {
    if (old_cells[old] == kNoNode) continue;
    Stay stay{old_cells[old], kSaturated, -1};
    const Coords x = old_cube.coords(old);
    if (same_dims && std::all_of(x.begin(), x.begin() + dims, [&](int c) { return c < side; })) {
      stay.cell = cube_.cell(x);
      stay.layer = cube_.layer(x);
      ++held[stay.layer];
    }
    stays.push_back(stay);
  }

  // The layers that already hold the most nodes become whole, the next one partial; with d >= 2, two of the whole
  // ones consecutive (the connectivity note).
  const std::uint64_t whole = per == 0 ? 0 : n / per;
  const std::uint64_t rest = per == 0 ? 0 : n % per;
  const LayerChoice choice = choose_layers(held, whole, rest > 0, dims >= 2);
  const std::vector<char>& is_whole = choice.whole;
  const int partial = choice.partial;

  // Keep the nodes on whole layers, and on the partial layer those at its lowest positions.
  std::vector<const Stay*> on_partial;
  for (const Stay& stay : stays) {
    if (stay.layer >= 0 && is_whole[stay.layer]) place(stay.node, stay.cell);
    if (stay.layer >= 0 && stay.layer == partial) on_partial.push_back(&stay);
  }
  std::stable_sort(on_partial.begin(), on_partial.end(), [&](const Stay* a, const Stay* b) {
    return cube_.position(a->cell) < cube_.position(b->cell);
  });
  for (std::uint64_t i = 0; i < std::min<std::uint64_t>(rest, on_partial.size()); ++i) {
    place(on_partial[i]->node, on_partial[i]->cell);
  }

  // Everyone else fills the free cells of the chosen layers, in layer then position order.
  std::vector<std::uint64_t> free_cells;
  for (int t = 0; t < side; ++t) {
    if (!is_whole[t]) continue;
    for (std::uint64_t pos = 0; pos < per; ++pos) {
      const std::uint64_t cell = cube_.layer_cell(t, pos);
      if (cell_node_[cell] == kNoNode) free_cells.push_back(cell);
    }
  }
  const std::uint64_t kept = std::accumulate(layer_count_.begin(), layer_count_.end(), std::uint64_t{0});
  if (partial >= 0) {
    for (std::uint64_t pos = 0; pos < per && kept + free_cells.size() < n; ++pos) {
      const std::uint64_t cell = cube_.layer_cell(partial, pos);
      if (cell_node_[cell] == kNoNode) free_cells.push_back(cell);
    }
  }
  LayoutDelta delta;
  delta.reshaped = true;
  auto next_free = free_cells.begin();
  for (const Stay& stay : stays) {
    if (stay.cell != kSaturated && cell_node_[stay.cell] == stay.node) continue;
    place(stay.node, *next_free++);
    delta.moved.push_back(stay.node);
  }
  if (added != kNoNode) place(added, *next_free++);
  GRIDTRAIN_REQUIRE(next_free == free_cells.end());
  partial_ = partial;  // placing layer by layer left count_layer's running guess behind
  std::sort(delta.moved.begin(), delta.moved.end());

  // Rebuild every line; a line keeps its master (by id) when that master is still in it.
  lines_ = empty_lines(cube_);
  for (int k = 0; k < dims; ++k) {
    for (LineState& line : lines_[k]) {
      if (k < old_cube.dims() && line.id.index < old_lines[k].size()) line.master = old_lines[k][line.id.index].master;
      refresh(line);
    }
  }

  const LineState none;
  for (int k = 0; k < std::max(dims, old_cube.dims()); ++k) {
    const std::uint64_t old_count = k < old_cube.dims() ? old_lines[k].size() : 0;
    const std::uint64_t new_count = k < dims ? lines_[k].size() : 0;
    for (std::uint64_t i = 0; i < std::max(old_count, new_count); ++i) {
      const LineState& was = i < old_count ? old_lines[k][i] : none;
      const LineState& now = i < new_count ? lines_[k][i] : none;
      if (!now.members.empty() && (was.members != now.members || was.master != now.master)) {
        delta.started.push_back(now);
      }
      if (!was.members.empty() && now.master != was.master) delta.stopped.emplace_back(was.id, was.master);
    }
  }
  return delta;
}

// ---- snapshot, restore and invariants -------------------------------------------------------------------------

LayoutSnapshot Layout::snapshot() const {
  LayoutSnapshot snap;
  snap.fixed_dims = fixed_dims_;
  snap.max_line = max_line_;
  snap.dims = cube_.dims();
  snap.side = cube_.side();
  for (const NodeId node : members()) snap.placements.emplace_back(node, coords(node));
  for (const auto& dim : lines_) {
    for (const LineState& line : dim) {
      if (!line.members.empty()) snap.masters.emplace_back(line.id, line.master);
    }
  }
  return snap;
}

Result<Layout> Layout::restore(const LayoutSnapshot& snap) {
  const auto invalid = [](std::string why) { return Error{.source = "layout snapshot", .message = std::move(why)}; };
  if (snap.fixed_dims < 0 || snap.fixed_dims > kMaxDims) return invalid("fixed_dims out of range");
  if (snap.fixed_dims == 0 && snap.max_line < 2) return invalid("automatic layout with max_line < 2");
  if (snap.dims < 1 || snap.dims > kMaxDims) return invalid("dims out of range");
  if (snap.fixed_dims != 0 && snap.dims > snap.fixed_dims) return invalid("more dims than fixed_dims");
  if (snap.side < 0 || power(static_cast<std::uint64_t>(snap.side), snap.dims) < snap.placements.size()) {
    return invalid("side too small for the placements");
  }
  // Before the cube is allocated: a cube (d >= 2) holds about as many cells as nodes.
  if (snap.dims >= 2 && !valid(snap.dims, snap.side, snap.placements.size())) return invalid("shape not valid for n");
  Layout layout(snap.fixed_dims, snap.max_line);
  layout.cube_ = Cube(snap.dims, snap.side);
  layout.cell_node_.assign(layout.cube_.cells(), kNoNode);
  layout.layer_count_.assign(static_cast<std::size_t>(snap.side), 0);
  for (const auto& [node, x] : snap.placements) {
    if (node == kNoNode || (!layout.cell_of_.empty() && layout.cell_of_.back().first >= node)) {
      return invalid("node " + std::to_string(node) + " invalid, repeated or out of order");
    }
    if (x.size() != static_cast<std::size_t>(snap.dims)) return invalid("node " + std::to_string(node) + " coords size");
    Coords c{};
    for (int k = 0; k < snap.dims; ++k) {
      if (x[k] < 0 || x[k] >= snap.side) return invalid("node " + std::to_string(node) + " outside the cube");
      c[k] = x[k];
    }
    const std::uint64_t cell = layout.cube_.cell(c);
    if (layout.cell_node_[cell] != kNoNode) return invalid("node " + std::to_string(node) + " shares a cell");
    layout.cell_node_[cell] = node;
    layout.cell_of_.emplace_back(node, cell);
    ++layout.layer_count_[layout.cube_.layer(c)];
  }
  for (int t = 0; t < snap.side; ++t) {
    const std::uint64_t count = layout.layer_count_[t];
    if (count == 0 || count == layout.cube_.lines_per_dim()) continue;
    if (layout.partial_ >= 0) return invalid("more than one partial layer");
    layout.partial_ = t;
  }
  layout.lines_ = empty_lines(layout.cube_);
  for (const auto& [id, master] : snap.masters) {
    if (id.dim < 0 || id.dim >= snap.dims || id.index >= layout.cube_.lines_per_dim()) return invalid("master of no line");
    layout.lines_[id.dim][id.index].master = master;
  }
  for (auto& dim : layout.lines_) {
    for (LineState& line : dim) {
      const NodeId claimed = line.master;
      layout.refresh(line);
      if (claimed != line.master) return invalid("line master missing or not a member of its line");
    }
  }
  if (std::string why = layout.check_invariants(); !why.empty()) return invalid(why);
  return layout;
}

std::string Layout::check_invariants() const {
  const int d = cube_.dims();
  const int s = cube_.side();
  const std::uint64_t n = cell_of_.size();
  const std::uint64_t per = cube_.lines_per_dim();
  if (cell_node_.size() != cube_.cells()) return "cell table has the wrong size";
  if (layer_count_.size() != static_cast<std::size_t>(s)) return "layer table has the wrong size";
  if (fixed_dims_ != 0 && d > fixed_dims_) return "more dims than the fixed dims";

  // Cells and nodes are in one-to-one correspondence.
  for (std::size_t i = 0; i < cell_of_.size(); ++i) {
    const auto& [node, cell] = cell_of_[i];
    if (i > 0 && cell_of_[i - 1].first >= node) return "node index out of order";
    if (cell >= cell_node_.size() || cell_node_[cell] != node) return "node " + std::to_string(node) + " lost";
  }
  const auto occupied = static_cast<std::uint64_t>(
      std::count_if(cell_node_.begin(), cell_node_.end(), [](NodeId node) { return node != kNoNode; }));
  if (occupied != n) return "a cell holds a node that is not a member";

  // The shape is one the policy keeps: valid for n, and no better-ranked one steady.
  if (d == 1 && s > 0 && cell_node_[s - 1] == kNoNode) return "d = 1 with a free last coordinate";
  if (std::string why = off_policy(n); !why.empty()) return why;

  // Whole layers plus at most one partial layer. Walks the cells like an odometer: no division per cell.
  std::vector<std::uint64_t> layers(static_cast<std::size_t>(s), 0);
  Coords x{};
  for (std::uint64_t cell = 0; cell < cell_node_.size(); ++cell) {
    if (cell_node_[cell] != kNoNode) ++layers[cube_.layer(x)];
    for (int k = 0; k < d && ++x[k] == s; ++k) x[k] = 0;
  }
  if (layers != layer_count_) return "layer counts are stale";
  int partial = -1;
  for (int t = 0; t < s; ++t) {
    if (layers[t] == 0 || layers[t] == per) continue;
    if (partial >= 0) return "layers " + std::to_string(partial) + " and " + std::to_string(t) + " both partial";
    partial = t;
  }
  if (partial != partial_) return "partial layer is stale";
  if (d >= 2) {
    std::vector<char> whole(static_cast<std::size_t>(s));
    for (int t = 0; t < s; ++t) whole[t] = layers[t] == per ? 1 : 0;
    if (!has_consecutive_pair(whole)) return "no two consecutive layers are whole";
  }

  // Union-find over the nodes (numbered in id order) that the lines join: one group, and nobody alone.
  std::vector<std::uint32_t> index_of(cell_node_.size(), 0);
  for (std::size_t i = 0; i < cell_of_.size(); ++i) index_of[cell_of_[i].second] = static_cast<std::uint32_t>(i);
  std::vector<std::uint32_t> parent(n);
  std::iota(parent.begin(), parent.end(), 0u);
  const auto root = [&parent](std::uint32_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  std::vector<std::uint32_t> size(n, 1);
  std::vector<char> partnered(n, 0);
  std::uint32_t line_root = 0;  // the root of the line walked below: one find per member, not two

  // Lines: all of them, in order, holding exactly their cells' nodes, balanced, each with a member as master.
  if (lines_.size() != static_cast<std::size_t>(d)) return "line table has the wrong number of dimensions";
  for (int k = 0; k < d; ++k) {
    const auto where = [k](std::uint64_t i) { return "line (" + std::to_string(k) + ", " + std::to_string(i) + ")"; };
    if (lines_[k].size() != per) return "dimension " + std::to_string(k) + " has the wrong number of lines";
    std::uint64_t least = kSaturated, most = 0;
    for (std::uint64_t i = 0; i < per; ++i) {
      const LineState& line = lines_[k][i];
      if (line.id != LineId{k, i}) return where(i) + " has the wrong id";
      std::size_t next = 0;
      std::uint64_t cell = cube_.line_cell(k, i, 0);
      std::uint32_t first = 0;
      for (int at = 0; at < s; ++at, cell += cube_.stride(k)) {
        const NodeId node = cell_node_[cell];
        if (node == kNoNode) continue;
        if (next >= line.members.size() || line.members[next] != node) return where(i) + " members are stale";
        const std::uint32_t at_index = index_of[cell];
        if (next == 0) {
          first = at_index;
          line_root = root(first);
        } else {
          partnered[first] = partnered[at_index] = 1;
          std::uint32_t other = root(at_index);
          if (other != line_root) {
            if (size[other] > size[line_root]) std::swap(other, line_root);  // by size: the trees stay shallow
            parent[other] = line_root;
            size[line_root] += size[other];
          }
        }
        ++next;
      }
      if (next != line.members.size()) return where(i) + " has extra members";
      if (line.members.empty() ? line.master != kNoNode : !has(line.members, line.master)) {
        return where(i) + " master is not a member";
      }
      least = std::min<std::uint64_t>(least, line.members.size());
      most = std::max<std::uint64_t>(most, line.members.size());
    }
    if (per > 0 && most - least > 1) {
      return "dimension " + std::to_string(k) + " lines hold " + std::to_string(least) + " to " +
             std::to_string(most) + " nodes";
    }
    if (fixed_dims_ == 0 && most > static_cast<std::uint64_t>(max_line_) && content(d, n)) {
      return "a line holds more than max_line nodes";  // allowed only while no shape within max_line is steady
    }
  }
  if (n >= 2) {
    for (std::size_t i = 0; i < n; ++i) {
      if (!partnered[i]) return "node " + std::to_string(cell_of_[i].first) + " shares no line with another";
    }
    for (std::uint32_t i = 1; i < n; ++i) {
      if (root(i) != root(0)) return "the lines do not connect node " + std::to_string(cell_of_[i].first);
    }
  }
  return "";
}

}  // namespace gridtrain::grid
