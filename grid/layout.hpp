#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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

// The d-dimensional grid the GridMaster keeps: where every node sits, its lines, and their masters.
//
// The grid is a cube of side s. Along every dimension, all s^(d-1) lines that the cube defines (empty ones
// included) hold populations within 1 of each other. Every node has one cell, so one line per dimension.
// Every non-empty line has one master, a member; it keeps its master while that master stays in the line, and
// otherwise appoints its lowest member id. The same sequence of operations always gives the same layout.
//
// Placement (layout.cpp says why): the occupied cells are whole layers plus part of one more (Cube), so a join
// moves no one and a leave moves at most one node. The side grows when the cube is full and shrinks, with
// hysteresis, when n <= (s-1)^d - (s-1)^(d-1)/2; a resize moves about d*n/s nodes. With d = 1 nobody ever moves.
class Layout {
 public:
  // REQUIRES: 1 <= dims <= kMaxDims.
  static Layout fixed(int dims);
  // The fewest dimensions (at most kMaxDims) whose lines hold at most max_line nodes; with hysteresis.
  // Changing dimensions moves everyone. REQUIRES: max_line >= 2.
  static Layout automatic(int max_line);
  // Rebuilds what snapshot() described: returns "" and sets `out`, or says why the snapshot is not a valid
  // layout and leaves `out` alone.
  static std::string restore(const LayoutSnapshot& snapshot, Layout& out);

  // REQUIRES: !contains(node), node != kNoNode.
  LayoutDelta add(NodeId node);
  // REQUIRES: contains(node).
  LayoutDelta remove(NodeId node);

  bool contains(NodeId node) const { return find(node) != cell_of_.end(); }
  std::size_t size() const { return cell_of_.size(); }
  int dims() const { return cube_.dims(); }
  int side() const { return cube_.side(); }
  std::vector<int> shape() const;  // side per dimension
  std::uint64_t lines_per_dim() const { return cube_.lines_per_dim(); }
  std::vector<NodeId> members() const;  // ascending

  // REQUIRES: contains(node); 0 <= dim < dims().
  std::vector<int> coords(NodeId node) const;
  LineId line_of(NodeId node, int dim) const;
  // REQUIRES: 0 <= id.dim < dims(), id.index < lines_per_dim(). Valid until the next add or remove.
  const LineState& line(LineId id) const { return lines_[id.dim][id.index]; }
  std::vector<LineState> lines() const;  // the non-empty lines, ascending by id

  LayoutSnapshot snapshot() const;
  // "" when every invariant above holds, else a description of the first violation. O(cells * dims).
  std::string check_invariants() const;

 private:
  class Change;
  using Placement = std::pair<NodeId, std::uint64_t>;
  Layout(int fixed_dims, int max_line);

  std::vector<Placement>::const_iterator find(NodeId node) const;
  std::uint64_t cell_of(NodeId node) const;
  int dims_for(std::uint64_t n) const;
  bool must_shrink(std::uint64_t n) const;
  std::uint64_t join_cell() const;
  std::uint64_t mover_cell(std::uint64_t hole) const;
  bool masters_any(std::uint64_t cell) const;
  void place(NodeId node, std::uint64_t cell);
  void vacate(std::uint64_t cell);
  void count_layer(int layer, std::int64_t change);
  void refresh(LineState& line) const;
  LayoutDelta reshape(int dims, int side, NodeId added);

  int fixed_dims_;  // 0: automatic
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
