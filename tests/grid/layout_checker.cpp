#include "tests/grid/layout_checker.hpp"

#include <algorithm>
#include <ranges>
#include <set>

namespace gridtrain::grid::testing {
namespace {

std::string name(LineId id) { return "line (" + std::to_string(id.dim) + ", " + std::to_string(id.index) + ")"; }

template <typename T, typename Less>
bool strictly_ascending(const std::vector<T>& items, Less less) {
  return std::adjacent_find(items.begin(), items.end(), [&](const T& a, const T& b) { return !less(a, b); }) ==
         items.end();
}

}  // namespace

std::string connected(const std::vector<std::vector<LineState>>& lines, const std::vector<NodeId>& nodes) {
  if (nodes.size() < 2) return "";
  std::vector<std::size_t> parent(nodes.size());
  for (std::size_t i = 0; i < parent.size(); ++i) parent[i] = i;
  const auto root = [&parent](std::size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  std::vector<char> partnered(nodes.size(), 0);
  for (const LineState& line : std::views::join(lines)) {
    if (line.members.size() < 2) continue;
    std::size_t first = nodes.size();
    for (const NodeId node : line.members) {
      const auto it = std::lower_bound(nodes.begin(), nodes.end(), node);
      if (it == nodes.end() || *it != node) return name(line.id) + " holds a stranger";
      const auto at = static_cast<std::size_t>(it - nodes.begin());
      partnered[at] = 1;
      if (first == nodes.size()) {
        first = at;
      } else {
        parent[root(at)] = root(first);
      }
    }
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (!partnered[i]) return "node " + std::to_string(nodes[i]) + " shares no line with another";
    if (root(i) != root(0)) {
      return "no line path from node " + std::to_string(nodes[0]) + " to " + std::to_string(nodes[i]);
    }
  }
  return "";
}

LayoutChecker::LayoutChecker(Layout& layout) : layout_(layout) {
  for (const LineState& line : layout_.lines()) shadow(line.id) = line;
  reload_nodes();
}

std::string LayoutChecker::add(NodeId node, LayoutDelta* out) {
  if (layout_.contains(node)) return "test bug: adding a member";
  LayoutDelta delta = layout_.add(node);
  std::string why = after(delta, node, kNoNode);
  if (out != nullptr) *out = std::move(delta);
  return why;
}

std::string LayoutChecker::remove(NodeId node, LayoutDelta* out) {
  if (!layout_.contains(node)) return "test bug: removing a stranger";
  LayoutDelta delta = layout_.remove(node);
  std::string why = after(delta, kNoNode, node);
  if (out != nullptr) *out = std::move(delta);
  return why;
}

std::string LayoutChecker::after(const LayoutDelta& delta, NodeId added, NodeId removed) {
  if (std::string why = layout_.check_invariants(); !why.empty()) return "invariant: " + why;
  if (std::string why = apply_lines(delta); !why.empty()) return "delta: " + why;
  if (std::string why = compare_lines(); !why.empty()) return "lines: " + why;
  if (std::string why = check_moved(delta, added, removed); !why.empty()) return "moved: " + why;
  if (std::string why = check_connected(); !why.empty()) return "connected: " + why;
  return "";
}

// On the lines as the deltas told them (compare_lines proved them the layout's), so on what the GridMaster sends.
std::string LayoutChecker::check_connected() {
  if (layout_.size() > 256 && ++operations_ % 61 != 0) return "";
  return connected(lines_, layout_.members());
}

LineState& LayoutChecker::shadow(LineId id) {
  if (lines_.size() <= static_cast<std::size_t>(id.dim)) lines_.resize(id.dim + 1);
  if (lines_[id.dim].size() <= id.index) lines_[id.dim].resize(id.index + 1);
  return lines_[id.dim][id.index];
}

// Stops first, then starts, as the GridMaster sends them; each message must be needed.
std::string LayoutChecker::apply_lines(const LayoutDelta& delta) {
  if (!strictly_ascending(delta.started, [](const LineState& a, const LineState& b) { return a.id < b.id; }) ||
      !strictly_ascending(delta.stopped, [](const auto& a, const auto& b) { return a.first < b.first; })) {
    return "started or stopped not ascending or repeated";
  }
  for (const auto& [id, master] : delta.stopped) {
    LineState& line = shadow(id);
    if (line.members.empty()) return "stop for " + name(id) + ", which was never started";
    if (line.master != master) return "stop for " + name(id) + " names the wrong master";
    line = LineState{};
  }
  auto stop = delta.stopped.begin();
  for (const LineState& line : delta.started) {
    if (line.members.empty()) return "started an empty " + name(line.id);
    if (std::find(line.members.begin(), line.members.end(), line.master) == line.members.end()) {
      return "started " + name(line.id) + " with a master outside it";
    }
    while (stop != delta.stopped.end() && stop->first < line.id) ++stop;
    const bool stopped = stop != delta.stopped.end() && stop->first == line.id;
    LineState& known = shadow(line.id);
    if (!known.members.empty()) {
      if (known.master != line.master) return name(line.id) + " changed master without a stop";
      if (known.members == line.members) return "started " + name(line.id) + ", which did not change";
    } else if (stopped && stop->second == line.master) {
      return "stopped " + name(line.id) + " although its master stayed";
    }
    // A master stays while it is in the line; otherwise the lowest id takes over.
    const NodeId previous = !known.members.empty() ? known.master : stopped ? stop->second : kNoNode;
    const bool stays = std::find(line.members.begin(), line.members.end(), previous) != line.members.end();
    if (line.master != (stays ? previous : *std::min_element(line.members.begin(), line.members.end()))) {
      return name(line.id) + " appointed the wrong master";
    }
    known = line;
  }
  return "";
}

// The shadow must equal the layout's lines, and be balanced on its own account.
std::string LayoutChecker::compare_lines() {
  const LineState none;
  const std::uint64_t per = layout_.lines_per_dim();
  if (lines_.size() < static_cast<std::size_t>(layout_.dims())) lines_.resize(layout_.dims());
  for (std::size_t k = 0; k < lines_.size(); ++k) {
    const bool real_dim = k < static_cast<std::size_t>(layout_.dims());
    if (real_dim && lines_[k].size() < per) lines_[k].resize(per);
    std::uint64_t least = ~std::uint64_t{0}, most = 0, held = 0;
    for (std::uint64_t i = 0; i < lines_[k].size(); ++i) {
      const LineId id{static_cast<int>(k), i};
      const LineState& real = real_dim && i < per ? layout_.line(id) : none;
      const LineState& known = lines_[k][i];
      if (known.members.empty() ? !real.members.empty() : known != real) {
        return name(id) + " is not what the deltas said";
      }
      if (real_dim && i < per) {
        least = std::min<std::uint64_t>(least, real.members.size());
        most = std::max<std::uint64_t>(most, real.members.size());
        held += real.members.size();
      }
    }
    if (!real_dim) continue;
    if (per > 0 && most - least > 1) return "dimension " + std::to_string(k) + " is unbalanced";
    if (held != layout_.size()) return "dimension " + std::to_string(k) + " does not hold every node once";
  }
  // What lies beyond the shape was just proven empty.
  lines_.resize(layout_.dims());
  for (auto& dim : lines_) dim.resize(per);
  return "";
}

std::string LayoutChecker::check_moved(const LayoutDelta& delta, NodeId added, NodeId removed) {
  const std::vector<NodeId>& moved = delta.moved;
  if (!strictly_ascending(moved, std::less<NodeId>())) return "not ascending";
  for (NodeId node : moved) {
    if (node == added || node == removed || !layout_.contains(node)) return "names the added, removed or a stranger";
  }
  std::set<NodeId> changed;
  if (delta.reshaped) {
    // Lines were renumbered: compare every node's coordinates.
    for (const NodeId node : layout_.members()) {
      if (node != added && coords_.at(node) != layout_.coords(node)) changed.insert(node);
    }
    reload_nodes();
  } else if (layout_.dims() == 1) {
    coords_.erase(removed);
    if (added != kNoNode) coords_[added] = layout_.coords(added);
    for (const auto& [node, x] : coords_) {
      if (x != layout_.coords(node)) changed.insert(node);
    }
  } else {
    // With d >= 2 and the same shape, a node's line numbers fix its coordinates. The deltas name every line a
    // node joined (compare_lines proved the shadow right), so they show every node that changed cell.
    coords_.erase(removed);
    line_index_.erase(removed);
    for (const LineState& line : delta.started) {
      for (const NodeId node : line.members) {
        if (node != added && line_index_.count(node) == 0) return "a started line holds a stranger";
        std::uint64_t& index = line_index_[node][line.id.dim];
        if (index != line.id.index && node != added) changed.insert(node);
        index = line.id.index;
      }
    }
    std::vector<NodeId> check = moved;
    if (added != kNoNode) check.push_back(added);
    for (const NodeId node : check) {
      coords_[node] = layout_.coords(node);
      for (int k = 0; k < layout_.dims(); ++k) {
        if (line_index_[node][k] != layout_.line_of(node, k).index) return "deltas disagree with line_of";
      }
    }
    if (moved.size() > 1) return std::to_string(moved.size()) + " nodes moved without a reshape";
  }
  if (changed != std::set<NodeId>(moved.begin(), moved.end())) {
    return std::to_string(changed.size()) + " nodes changed cell, " + std::to_string(moved.size()) + " reported";
  }
  if (coords_.size() != layout_.size()) return "node count drifted";
  return "";
}

void LayoutChecker::reload_nodes() {
  coords_.clear();
  line_index_.clear();
  for (const NodeId node : layout_.members()) {
    coords_[node] = layout_.coords(node);
    auto& index = line_index_[node];
    for (int k = 0; k < layout_.dims(); ++k) index[k] = layout_.line_of(node, k).index;
  }
}

}  // namespace gridtrain::grid::testing
