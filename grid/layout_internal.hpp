#pragma once
// The Layout's internals, shared by the files that implement it: construction and queries (layout.cpp, with the
// design note), the shape policy (layout_shape.cpp), joins and leaves (layout_moves.cpp), resizes and changes of
// dimensions (layout_reshape.cpp), and snapshot, restore and the invariants (layout_check.cpp).
// Not part of the Layout's interface: only grid/layout*.cpp include it.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "grid/cube.hpp"
#include "grid/layout.hpp"

namespace gridtrain::grid::layout_internal {

inline constexpr std::uint64_t kSaturated = std::numeric_limits<std::uint64_t>::max();

// base^exp, or kSaturated where that overflows.
inline std::uint64_t power(std::uint64_t base, int exp) {
  std::uint64_t r = 1;
  for (int i = 0; i < exp; ++i) {
    if (base != 0 && r > kSaturated / base) return kSaturated;
    r *= base;
  }
  return r;
}

inline bool has(const std::vector<NodeId>& nodes, NodeId node) {
  return std::find(nodes.begin(), nodes.end(), node) != nodes.end();
}

// Whether a cube of `dims` dimensions and side `side` may hold n nodes (the "Shapes" note in layout.cpp); d = 1
// holds any n >= 1. Defined in layout_shape.cpp.
bool valid(int dims, int side, std::uint64_t n);

// Every line of the cube, empty, with its id. Defined in layout.cpp.
std::vector<std::vector<LineState>> empty_lines(const Cube& cube);

}  // namespace gridtrain::grid::layout_internal
