// Joins and leaves that keep the shape: the cell a join takes, the one node a leave may move, and the lines and
// the delta they change (the "Layers" note in layout.cpp).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "base/check.hpp"
#include "grid/layout.hpp"
#include "grid/layout_internal.hpp"

namespace gridtrain::grid {

using layout_internal::has;
using layout_internal::kSaturated;

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

}  // namespace gridtrain::grid
