// Resizes and changes of dimensions: the layers the new cube makes whole, which nodes keep their cells and where
// the others go, and the lines rebuilt (the "Resizing" note in layout.cpp).

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "base/check.hpp"
#include "grid/layer_choice.hpp"
#include "grid/layout.hpp"
#include "grid/layout_internal.hpp"

namespace gridtrain::grid {

using layout_internal::empty_lines;
using layout_internal::kSaturated;

namespace {

// Where a remaining node lands if it keeps its coordinates (cell kSaturated and layer -1: outside the new cube).
struct Stay {
  NodeId node;
  std::uint64_t cell;
  int layer;
};

struct Stays {
  std::vector<Stay> nodes;          // in old cell order, which fixes the order of everything a reshape does
  std::vector<std::uint64_t> held;  // per layer of the new cube, the nodes that can keep their coordinates on it
};

// Every node of `old_cells` (cells of `old_cube`), and where it lands in `cube` if it keeps its coordinates.
Stays stays_in(const Cube& cube, const Cube& old_cube, const std::vector<NodeId>& old_cells, std::size_t nodes) {
  const bool same_dims = cube.dims() == old_cube.dims();
  Stays stays;
  stays.nodes.reserve(nodes);
  stays.held.assign(static_cast<std::size_t>(cube.side()), 0);
  for (std::uint64_t old = 0; old < old_cells.size(); ++old) {
    if (old_cells[old] == kNoNode) continue;
    Stay stay{old_cells[old], kSaturated, -1};
    const Coords x = old_cube.coords(old);
    if (same_dims && std::all_of(x.begin(), x.begin() + cube.dims(), [&](int c) { return c < cube.side(); })) {
      stay.cell = cube.cell(x);
      stay.layer = cube.layer(x);
      ++stays.held[stay.layer];
    }
    stays.nodes.push_back(stay);
  }
  return stays;
}

// The free cells (in `cell_node`) that the nodes not kept fill, in layer then position order: every free cell of
// the whole layers, then the partial layer's lowest free positions until `kept` plus their number reaches n.
std::vector<std::uint64_t> free_cells(const Cube& cube, const std::vector<NodeId>& cell_node, const LayerChoice& choice,
                                      std::uint64_t kept, std::uint64_t n) {
  const std::uint64_t per = cube.lines_per_dim();
  std::vector<std::uint64_t> free;
  for (int t = 0; t < cube.side(); ++t) {
    if (!choice.whole[t]) continue;
    for (std::uint64_t pos = 0; pos < per; ++pos) {
      const std::uint64_t cell = cube.layer_cell(t, pos);
      if (cell_node[cell] == kNoNode) free.push_back(cell);
    }
  }
  if (choice.partial >= 0) {
    for (std::uint64_t pos = 0; pos < per && kept + free.size() < n; ++pos) {
      const std::uint64_t cell = cube.layer_cell(choice.partial, pos);
      if (cell_node[cell] == kNoNode) free.push_back(cell);
    }
  }
  return free;
}

// Adds to `delta` the lines, matched by id, that the rebuild from `old_lines` to `new_lines` started (non-empty,
// with other members or another master) and stopped (were non-empty, and changed master).
void diff_lines(const std::vector<std::vector<LineState>>& old_lines,
                const std::vector<std::vector<LineState>>& new_lines, LayoutDelta& delta) {
  const LineState none;
  for (std::size_t k = 0; k < std::max(old_lines.size(), new_lines.size()); ++k) {
    const std::uint64_t old_count = k < old_lines.size() ? old_lines[k].size() : 0;
    const std::uint64_t new_count = k < new_lines.size() ? new_lines[k].size() : 0;
    for (std::uint64_t i = 0; i < std::max(old_count, new_count); ++i) {
      const LineState& was = i < old_count ? old_lines[k][i] : none;
      const LineState& now = i < new_count ? new_lines[k][i] : none;
      if (!now.members.empty() && (was.members != now.members || was.master != now.master)) {
        delta.started.push_back(now);
      }
      if (!was.members.empty() && now.master != was.master) delta.stopped.emplace_back(was.id, was.master);
    }
  }
}

}  // namespace

LayoutDelta Layout::reshape(Shape shape, NodeId added) {
  const int dims = shape.dims;
  const int side = shape.side;
  const Cube old_cube = cube_;
  const std::vector<NodeId> old_cells = std::move(cell_node_);
  const std::vector<std::vector<LineState>> old_lines = std::move(lines_);

  cube_ = Cube(dims, side);
  cell_node_.assign(cube_.cells(), kNoNode);
  layer_count_.assign(static_cast<std::size_t>(side), 0);
  partial_ = -1;
  const std::uint64_t per = cube_.lines_per_dim();
  const std::uint64_t n = cell_of_.size() + (added == kNoNode ? 0 : 1);
  const Stays stays = stays_in(cube_, old_cube, old_cells, cell_of_.size());

  // The layers that already hold the most nodes become whole, the next one partial; with d >= 2, two of the whole
  // ones consecutive (the "Connectivity" note in layout.cpp).
  const std::uint64_t whole = per == 0 ? 0 : n / per;
  const std::uint64_t rest = per == 0 ? 0 : n % per;
  const LayerChoice choice = choose_layers(stays.held, whole, rest > 0, dims >= 2);
  const std::vector<char>& is_whole = choice.whole;
  const int partial = choice.partial;

  // Keep the nodes on whole layers, and on the partial layer those at its lowest positions.
  std::vector<const Stay*> on_partial;
  for (const Stay& stay : stays.nodes) {
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
  const std::uint64_t kept = std::accumulate(layer_count_.begin(), layer_count_.end(), std::uint64_t{0});
  const std::vector<std::uint64_t> free = free_cells(cube_, cell_node_, choice, kept, n);
  LayoutDelta delta;
  delta.reshaped = true;
  auto next_free = free.begin();
  for (const Stay& stay : stays.nodes) {
    if (stay.cell != kSaturated && cell_node_[stay.cell] == stay.node) continue;
    place(stay.node, *next_free++);
    delta.moved.push_back(stay.node);
  }
  if (added != kNoNode) place(added, *next_free++);
  GRIDTRAIN_REQUIRE(next_free == free.end());
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
  diff_lines(old_lines, lines_, delta);
  return delta;
}

}  // namespace gridtrain::grid
