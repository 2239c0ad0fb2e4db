#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "grid/cube.hpp"

namespace gridtrain::grid {

using NodeId = std::uint64_t;
inline constexpr NodeId kNoNode = ~NodeId{0};  // never a member; the master of an empty line

// A line in dimension `dim`: the cells that share the other d-1 coordinates. `index` numbers it within its
// dimension for the current shape (see Cube); a reshape renumbers lines.
struct LineId {
  int dim = 0;
  std::uint64_t index = 0;
  auto operator<=>(const LineId&) const = default;
};

struct LineState {
  LineId id;
  std::vector<NodeId> members;  // ordered by coordinate along id.dim: a member's position is its peer index
  NodeId master = kNoNode;      // a member; kNoNode only for an empty line
  bool operator==(const LineState&) const = default;
};

// What one add or remove changed, exactly: a line missing from `started` and `stopped` kept its members, their
// order and its master. Send every stop before any start: one node may lose a line and gain another in the same
// dimension. A stop may name a master that has just left.
struct LayoutDelta {
  // Lines, now non-empty, whose members or master changed: send start_line to `master`.
  std::vector<LineState> started;
  // (line, its previous master) for every line that emptied or changed master.
  std::vector<std::pair<LineId, NodeId>> stopped;
  // Nodes other than the one added or removed whose coordinates changed, ascending.
  std::vector<NodeId> moved;
  bool reshaped = false;  // the side or the number of dimensions changed
};

// Everything needed to rebuild an identical Layout elsewhere (a GridMaster successor).
struct LayoutSnapshot {
  int fixed_dims = 0;  // 0: automatic
  int max_line = 0;
  int dims = 1;
  int side = 0;
  std::vector<std::pair<NodeId, std::vector<int>>> placements;  // ascending by node
  std::vector<std::pair<LineId, NodeId>> masters;                // every non-empty line, ascending
  bool operator==(const LayoutSnapshot&) const = default;
};

// The grid the GridMaster keeps: where every node sits, its lines, and their masters.
//
// The grid is a cube of side s in d' dimensions, d' the effective dimensions (dims(), at most what the policy
// allows). Along every dimension, all s^(d'-1) lines that the cube defines (empty ones included) hold populations
// within 1 of each other. Every node has one cell, so one line per dimension. Every non-empty line has one master, a
// member; it keeps its master while that master stays in the line, and otherwise appoints its lowest member id. The
// same sequence of operations always gives the same layout.
//
// The lines connect the cluster: with n >= 2 every node shares a line with another, and the graph of "shares a
// line" is connected, so averaging along lines reaches everyone. How (layout.cpp has the details):
// - The occupied cells are w whole "layers" plus part of one more; a layer holds one cell of every line, so every
//   line holds w or w+1 nodes, a join moves no one, and a leave moves at most one node.
// - A cube (d' >= 2) is used only while w >= 2 and two whole layers are consecutive (mod s). Proof sketch: from a
//   node of one such layer to the other and back, along dimension d'-1 and then k, is one step along k; these
//   steps reach the whole first layer, and every other node has a line into it. A layer alone, or two layers whose
//   difference shares a factor with s, can leave nodes alone or split in two.
// - A cube also needs w >= s/2, so that averaging mixes fast: every layout measured reaches the mean (mixing.hpp,
//   to 1e-6 of the initial spread) within 21 rounds per effective dimension; a full cube needs d'.
// - Where no cube of the allowed dimensions qualifies, fewer dimensions are used: one line of everybody (d' = 1)
//   always qualifies. fixed(2) keeps one line up to 6 nodes (2 x 2 holds 4 but 5 would leave it again); fixed(3)
//   drops to 6 x 6 at 28 nodes, which no connected 3-D cube holds, and returns to 3-D at 36.
// - The shape changes with hysteresis: to a better-ranked one only with half a layer of margin, so joins and
//   leaves at a boundary do not reshape every operation. A resize moves about d'*n/s nodes; a change of d' moves
//   everyone. With d' = 1 nobody ever moves.
class Layout {
 public:
  // At most `dims` dimensions: the most whose cube connects and mixes (see above), fewer while n is small.
  // REQUIRES: 1 <= dims <= kMaxDims.
  static Layout fixed(int dims);
  // The fewest dimensions (at most kMaxDims) whose lines hold at most max_line nodes, with hysteresis. Where no such
  // shape connects n nodes (small max_line, small n), connectivity wins: fewer dimensions, longer lines. Changing
  // dimensions moves everyone. REQUIRES: max_line >= 2.
  static Layout automatic(int max_line);
  // Rebuilds what snapshot() described, or says why the snapshot is not a valid layout.
  static Result<Layout> restore(const LayoutSnapshot& snapshot);

  // REQUIRES: !contains(node), node != kNoNode.
  LayoutDelta add(NodeId node);
  // REQUIRES: contains(node).
  LayoutDelta remove(NodeId node);

  bool contains(NodeId node) const { return find(node) != cell_of_.end(); }
  std::size_t size() const { return cell_of_.size(); }
  int dims() const { return cube_.dims(); }  // the effective dimensions; 1 while empty
  int side() const { return cube_.side(); }
  std::vector<int> shape() const;  // side per effective dimension
  std::uint64_t lines_per_dim() const { return cube_.lines_per_dim(); }
  std::vector<NodeId> members() const;  // ascending

  // REQUIRES: contains(node); 0 <= dim < dims().
  std::vector<int> coords(NodeId node) const;
  LineId line_of(NodeId node, int dim) const;
  // REQUIRES: 0 <= id.dim < dims(), id.index < lines_per_dim(). Valid until the next add or remove.
  const LineState& line(LineId id) const { return lines_[id.dim][id.index]; }
  std::vector<LineState> lines() const;  // the non-empty lines, ascending by id

  LayoutSnapshot snapshot() const;
  // "" when every invariant above holds (connectivity included, and that the shape is the one the policy keeps),
  // else a description of the first violation. O(cells * dims).
  std::string check_invariants() const;

 private:
  class Change;
  struct Shape {
    int dims = 1;
    int side = 0;
    bool operator==(const Shape&) const = default;
  };
  using Placement = std::pair<NodeId, std::uint64_t>;
  Layout(int fixed_dims, int max_line);

  std::vector<Placement>::const_iterator find(NodeId node) const;
  std::uint64_t cell_of(NodeId node) const;
  std::vector<int> preferences(std::uint64_t n) const;
  bool content(int dims, std::uint64_t n) const;
  std::string off_policy(std::uint64_t n) const;
  Shape shape_for(std::uint64_t n) const;
  std::uint64_t join_cell() const;
  std::optional<int> refill_layer(std::uint64_t hole) const;
  std::uint64_t mover_cell(std::uint64_t hole, int from) const;
  bool masters_any(std::uint64_t cell) const;
  void place(NodeId node, std::uint64_t cell);
  void vacate(std::uint64_t cell);
  void count_layer(int layer, std::int64_t change);
  void refresh(LineState& line) const;
  LayoutDelta reshape(Shape shape, NodeId added);

  int fixed_dims_;  // 0: automatic; else the most dimensions
  int max_line_;
  Cube cube_;
  std::vector<NodeId> cell_node_;            // per cell; kNoNode when free
  // (node, cell), ascending by node: lookups are binary searches, and a walk is sequential and ordered. An add
  // or remove shifts the tail, a few microseconds at n = 5000.
  std::vector<Placement> cell_of_;
  std::vector<std::uint64_t> layer_count_;   // nodes per layer
  int partial_ = -1;                         // the one layer neither full nor empty, or -1
  std::vector<std::vector<LineState>> lines_;  // [dim][index], empty lines included
};

}  // namespace gridtrain::grid
