#pragma once

#include <vector>

#include "grid/layout.hpp"

namespace gridtrain::grid {

// How fast averaging along a layout's lines reaches the global mean: the figure that says whether a layout's lines
// are good for training, beside connectivity (which only says that they reach it at all).
//
// The model is the grid allreduce with θ = α = 1: round t replaces the value of every node, line by line in
// dimension t mod dims(), with the exact mean of its line; a line of one keeps its value. A full cube reaches the
// mean in dims() rounds; layout.cpp says what a partial one needs.
struct Mixing {
  int rounds = 0;        // rounds run
  bool reached = false;  // after `rounds`, every value is within the tolerance of the mean
};

// Runs rounds until every node is within `tolerance` times the initial spread (max - min of `values`) of the mean of
// `values`, or `max_rounds` ran. `values[i]` belongs to the i-th member in ascending id order. A spread of 0, and
// layouts of fewer than two nodes, need 0 rounds.
// REQUIRES: values.size() == layout.size(), tolerance > 0, max_rounds >= 0.
Mixing rounds_to_mean(const Layout& layout, std::vector<double> values, double tolerance = 1e-6,
                      int max_rounds = 10000);

// The same from each node's rank in id order (0, 1, ..., n-1): values that follow the order nodes joined in, so
// they line up with the layers that joins fill one after another.
Mixing rounds_to_mean(const Layout& layout, double tolerance = 1e-6, int max_rounds = 10000);

}  // namespace gridtrain::grid
