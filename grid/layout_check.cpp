// Snapshot and restore, and the check restore relies on: it rebuilds a layout only where check_invariants, which
// names the first broken invariant, finds none.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "grid/layer_choice.hpp"
#include "grid/layout.hpp"
#include "grid/layout_internal.hpp"

namespace gridtrain::grid {

using layout_internal::empty_lines;
using layout_internal::has;
using layout_internal::kSaturated;
using layout_internal::power;
using layout_internal::valid;

namespace {

using Placements = std::vector<std::pair<NodeId, std::uint64_t>>;  // (node, cell), ascending by node

std::string line_name(LineId id) {
  return "line (" + std::to_string(id.dim) + ", " + std::to_string(id.index) + ")";
}

// Whether the occupied cells are whole layers plus at most one partial layer, as `layer_count` and `partial_layer`
// say, with two consecutive layers whole when d >= 2: "" or what is wrong. Walks the cells like an odometer: no
// division per cell.
std::string check_layers(const Cube& cube, const std::vector<NodeId>& cell_node,
                         const std::vector<std::uint64_t>& layer_count, int partial_layer) {
  const int d = cube.dims();
  const int s = cube.side();
  const std::uint64_t per = cube.lines_per_dim();
  std::vector<std::uint64_t> layers(static_cast<std::size_t>(s), 0);
  Coords x{};
  for (std::uint64_t cell = 0; cell < cell_node.size(); ++cell) {
    if (cell_node[cell] != kNoNode) ++layers[cube.layer(x)];
    for (int k = 0; k < d && ++x[k] == s; ++k) x[k] = 0;
  }
  if (layers != layer_count) return "layer counts are stale";
  int partial = -1;
  for (int t = 0; t < s; ++t) {
    if (layers[t] == 0 || layers[t] == per) continue;
    if (partial >= 0) return "layers " + std::to_string(partial) + " and " + std::to_string(t) + " both partial";
    partial = t;
  }
  if (partial != partial_layer) return "partial layer is stale";
  if (d >= 2) {
    std::vector<char> whole(static_cast<std::size_t>(s));
    for (int t = 0; t < s; ++t) whole[t] = layers[t] == per ? 1 : 0;
    if (!has_consecutive_pair(whole)) return "no two consecutive layers are whole";
  }
  return "";
}

// Union-find over the nodes (numbered in id order) that the lines join, by size so that the trees stay shallow;
// and whether each node shares a line with another. Fed each line's members in order.
class LineGroups {
 public:
  LineGroups(const Placements& placements, std::size_t cells)
      : index_of_(cells, 0), parent_(placements.size()), size_(placements.size(), 1), partnered_(placements.size(), 0) {
    for (std::size_t i = 0; i < placements.size(); ++i) index_of_[placements[i].second] = static_cast<std::uint32_t>(i);
    std::iota(parent_.begin(), parent_.end(), 0u);
  }

  // The line's first member; the root of its group is kept for the others: one find per member, not two.
  void first_member(std::uint64_t cell) {
    first_ = index_of_[cell];
    line_root_ = root(first_);
  }

  void next_member(std::uint64_t cell) {
    const std::uint32_t at = index_of_[cell];
    partnered_[first_] = partnered_[at] = 1;
    std::uint32_t other = root(at);
    if (other == line_root_) return;
    if (size_[other] > size_[line_root_]) std::swap(other, line_root_);
    parent_[other] = line_root_;
    size_[line_root_] += size_[other];
  }

  // "" when there are fewer than two nodes, or every node shares a line with another and all are one group.
  std::string check(const Placements& placements) {
    if (placements.size() < 2) return "";
    for (std::size_t i = 0; i < placements.size(); ++i) {
      if (!partnered_[i]) return "node " + std::to_string(placements[i].first) + " shares no line with another";
    }
    for (std::uint32_t i = 1; i < placements.size(); ++i) {
      if (root(i) != root(0)) return "the lines do not connect node " + std::to_string(placements[i].first);
    }
    return "";
  }

 private:
  std::uint32_t root(std::uint32_t i) {
    while (parent_[i] != i) i = parent_[i] = parent_[parent_[i]];
    return i;
  }

  std::vector<std::uint32_t> index_of_;  // per cell: its node's number
  std::vector<std::uint32_t> parent_;
  std::vector<std::uint32_t> size_;
  std::vector<char> partnered_;
  std::uint32_t first_ = 0;      // the number of the current line's first member
  std::uint32_t line_root_ = 0;  // the root of its group
};

// Whether `line` holds exactly the nodes on its cells, in order; joins them in `groups`. "" or what is wrong.
std::string check_members(const Cube& cube, const std::vector<NodeId>& cell_node, const LineState& line,
                          LineGroups& groups) {
  const int k = line.id.dim;
  std::size_t next = 0;
  std::uint64_t cell = cube.line_cell(k, line.id.index, 0);
  for (int at = 0; at < cube.side(); ++at, cell += cube.stride(k)) {
    const NodeId node = cell_node[cell];
    if (node == kNoNode) continue;
    if (next >= line.members.size() || line.members[next] != node) return line_name(line.id) + " members are stale";
    if (next == 0) {
      groups.first_member(cell);
    } else {
      groups.next_member(cell);
    }
    ++next;
  }
  if (next != line.members.size()) return line_name(line.id) + " has extra members";
  return "";
}

}  // namespace

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

  // Whole layers plus at most one partial layer.
  if (std::string why = check_layers(cube_, cell_node_, layer_count_, partial_); !why.empty()) return why;

  // Lines: all of them, in order, holding exactly their cells' nodes, balanced, each with a member as master; and
  // together they give everyone a partner and connect everyone.
  LineGroups groups(cell_of_, cell_node_.size());
  if (lines_.size() != static_cast<std::size_t>(d)) return "line table has the wrong number of dimensions";
  for (int k = 0; k < d; ++k) {
    if (lines_[k].size() != per) return "dimension " + std::to_string(k) + " has the wrong number of lines";
    std::uint64_t least = kSaturated, most = 0;
    for (std::uint64_t i = 0; i < per; ++i) {
      const LineState& line = lines_[k][i];
      if (line.id != LineId{k, i}) return line_name(LineId{k, i}) + " has the wrong id";
      if (std::string why = check_members(cube_, cell_node_, line, groups); !why.empty()) return why;
      if (line.members.empty() ? line.master != kNoNode : !has(line.members, line.master)) {
        return line_name(line.id) + " master is not a member";
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
  return groups.check(cell_of_);
}

}  // namespace gridtrain::grid
