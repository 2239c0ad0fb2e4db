#pragma once

#include <array>
#include <cstdint>

namespace gridtrain::grid {

inline constexpr int kMaxDims = 6;

// A cell's coordinates; only the first dims() entries are meaningful.
using Coords = std::array<int, kMaxDims>;

// Index arithmetic on a d-dimensional cube of side s: its cells, lines and layers. Holds no nodes.
//
// Cells are numbered x_0 + x_1*s + ... + x_{d-1}*s^(d-1). A line in dimension k is the s cells that share every
// coordinate but x_k; it is numbered by those d-1 coordinates in the same way (x_k left out). Layer t is the
// set of cells with x_{d-1} = (x_0 + ... + x_{d-2} + t) mod s. Each layer holds exactly one cell of every line
// in every dimension, so whole layers plus part of one more leave every line of a dimension within 1 of the
// others. A cell's position in its layer is its first d-1 coordinates, numbered like a cell.
class Cube {
 public:
  Cube() = default;  // side 0: no cells, no lines
  // REQUIRES: 1 <= dims <= kMaxDims, side >= 0, side^dims < 2^63.
  Cube(int dims, int side);

  int dims() const { return dims_; }
  int side() const { return side_; }
  std::uint64_t cells() const { return pow_[dims_]; }
  // Lines in each dimension; also the cells in one layer.
  std::uint64_t lines_per_dim() const { return side_ == 0 ? 0 : pow_[dims_ - 1]; }

  // REQUIRES (all below): side() > 0 and arguments inside the cube.
  std::uint64_t cell(const Coords& x) const;
  Coords coords(std::uint64_t cell) const;
  std::uint64_t line_index(std::uint64_t cell, int dim) const;
  // The cell at coordinate x along a line; the next one is stride(dim) further.
  std::uint64_t line_cell(int dim, std::uint64_t line, int x) const;
  std::uint64_t stride(int dim) const { return pow_[dim]; }
  int layer(std::uint64_t cell) const;
  int layer(const Coords& x) const;
  std::uint64_t position(std::uint64_t cell) const { return cell % pow_[dims_ - 1]; }
  std::uint64_t layer_cell(int layer, std::uint64_t position) const;

 private:
  int dims_ = 1;
  int side_ = 0;
  std::array<std::uint64_t, kMaxDims + 1> pow_{1};  // pow_[k] = side^k
};

}  // namespace gridtrain::grid
