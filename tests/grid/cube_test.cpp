#include <doctest/doctest.h>

#include <set>
#include <vector>

#include "grid/cube.hpp"

using gridtrain::grid::Coords;
using gridtrain::grid::Cube;

TEST_CASE("cells, coordinates and layer positions convert both ways") {
  for (int d = 1; d <= 4; ++d) {
    for (int s = 1; s <= 5; ++s) {
      const Cube cube(d, s);
      for (std::uint64_t cell = 0; cell < cube.cells(); ++cell) {
        CHECK(cube.cell(cube.coords(cell)) == cell);
        CHECK(cube.layer_cell(cube.layer(cell), cube.position(cell)) == cell);
      }
    }
  }
}

TEST_CASE("a cell numbers as x0 + x1*s + x2*s^2 and its lines leave its own coordinate out") {
  const Cube cube(3, 4);
  const std::uint64_t cell = cube.cell(Coords{1, 2, 3});
  CHECK(cell == 1 + 2 * 4 + 3 * 16);
  CHECK(cube.line_index(cell, 0) == 2 + 3 * 4);
  CHECK(cube.line_index(cell, 1) == 1 + 3 * 4);
  CHECK(cube.line_index(cell, 2) == 1 + 2 * 4);
  CHECK(cube.line_cell(1, cube.line_index(cell, 1), 0) == cube.cell(Coords{1, 0, 3}));
  // Layer t holds the cells with x2 = (x0 + x1 + t) mod s: 3 = (1 + 2 + 0).
  CHECK(cube.layer(cell) == 0);
  CHECK(cube.layer(Coords{1, 2, 0}) == 1);
}

TEST_CASE("every layer holds exactly one cell of every line in every dimension") {
  for (int d = 1; d <= 5; ++d) {
    for (int s = 1; s <= 5; ++s) {
      const Cube cube(d, s);
      for (int t = 0; t < s; ++t) {
        for (int k = 0; k < d; ++k) {
          std::vector<int> hits(cube.lines_per_dim(), 0);
          for (std::uint64_t pos = 0; pos < cube.lines_per_dim(); ++pos) {
            const std::uint64_t cell = cube.layer_cell(t, pos);
            CHECK(cube.layer(cell) == t);
            ++hits[cube.line_index(cell, k)];
          }
          CHECK(std::set<int>(hits.begin(), hits.end()) == std::set<int>{1});
        }
      }
    }
  }
}

TEST_CASE("the lines of a dimension partition the cube") {
  const Cube cube(4, 3);
  for (int k = 0; k < 4; ++k) {
    std::vector<int> seen(cube.cells(), 0);
    for (std::uint64_t line = 0; line < cube.lines_per_dim(); ++line) {
      for (int x = 0; x < 3; ++x) {
        const std::uint64_t cell = cube.line_cell(k, line, x);
        CHECK(cube.line_index(cell, k) == line);
        CHECK(cube.coords(cell)[k] == x);
        ++seen[cell];
      }
    }
    CHECK(std::set<int>(seen.begin(), seen.end()) == std::set<int>{1});
  }
}

TEST_CASE("an empty cube has no cells and no lines") {
  const Cube cube(3, 0);
  CHECK(cube.cells() == 0);
  CHECK(cube.lines_per_dim() == 0);
  CHECK(Cube(1, 0).lines_per_dim() == 0);
}
