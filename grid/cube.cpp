#include "grid/cube.hpp"

#include "base/check.hpp"

namespace gridtrain::grid {

Cube::Cube(int dims, int side) : dims_(dims), side_(side) {
  GRIDTRAIN_REQUIRE(dims >= 1 && dims <= kMaxDims && side >= 0);
  pow_.fill(0);
  pow_[0] = 1;
  for (int k = 1; k <= dims_; ++k) pow_[k] = pow_[k - 1] * static_cast<std::uint64_t>(side_);
}

std::uint64_t Cube::cell(const Coords& x) const {
  std::uint64_t c = 0;
  for (int k = dims_ - 1; k >= 0; --k) c = c * static_cast<std::uint64_t>(side_) + static_cast<std::uint64_t>(x[k]);
  return c;
}

Coords Cube::coords(std::uint64_t cell) const {
  Coords x{};
  const auto s = static_cast<std::uint64_t>(side_);
  for (int k = 0; k < dims_; ++k) {
    x[k] = static_cast<int>(cell % s);
    cell /= s;
  }
  return x;
}

std::uint64_t Cube::line_index(std::uint64_t cell, int dim) const {
  return cell % pow_[dim] + (cell / pow_[dim + 1]) * pow_[dim];
}

std::uint64_t Cube::line_cell(int dim, std::uint64_t line, int x) const {
  return line % pow_[dim] + static_cast<std::uint64_t>(x) * pow_[dim] + (line / pow_[dim]) * pow_[dim + 1];
}

int Cube::layer(const Coords& x) const {
  std::int64_t t = x[dims_ - 1];
  for (int k = 0; k + 1 < dims_; ++k) t -= x[k];
  t %= side_;
  return static_cast<int>(t < 0 ? t + side_ : t);
}

int Cube::layer(std::uint64_t cell) const { return layer(coords(cell)); }

std::uint64_t Cube::layer_cell(int layer, std::uint64_t position) const {
  // The position fixes x_0..x_{d-2}; the layer then fixes x_{d-1}.
  std::uint64_t sum = 0;
  const auto s = static_cast<std::uint64_t>(side_);
  for (std::uint64_t p = position; p != 0; p /= s) sum += p % s;
  const std::uint64_t last = (static_cast<std::uint64_t>(layer) + sum) % s;
  return position + last * pow_[dims_ - 1];
}

}  // namespace gridtrain::grid
