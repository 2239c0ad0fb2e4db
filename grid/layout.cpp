#include "grid/layout.hpp"

#include <algorithm>
#include <vector>

#include "base/check.hpp"
#include "grid/layout_internal.hpp"

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
//
// This file builds the layout and answers its queries; the other jobs are in layout_shape.cpp, layout_moves.cpp,
// layout_reshape.cpp and layout_check.cpp (grid/layout_internal.hpp).

namespace gridtrain::grid {

std::vector<std::vector<LineState>> layout_internal::empty_lines(const Cube& cube) {
  std::vector<std::vector<LineState>> lines(cube.dims());
  for (int k = 0; k < cube.dims(); ++k) {
    lines[k].resize(cube.lines_per_dim());
    for (std::uint64_t i = 0; i < lines[k].size(); ++i) lines[k][i].id = LineId{k, i};
  }
  return lines;
}

Layout::Layout(int fixed_dims, int max_line)
    : fixed_dims_(fixed_dims), max_line_(max_line), cube_(1, 0), lines_(layout_internal::empty_lines(cube_)) {}

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

}  // namespace gridtrain::grid
