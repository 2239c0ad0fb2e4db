#pragma once

#include <cstdint>
#include <vector>

namespace gridtrain::grid {

// Which layers of a cube a reshape makes whole, and which one partial (layout.cpp says why).
struct LayerChoice {
  std::vector<char> whole;  // per layer
  int partial = -1;         // -1: none
};

// Whether layers t and t+1 (mod the number of layers) are both whole for some t: what connects a cube's lines.
bool has_consecutive_pair(const std::vector<char>& whole);

// `held[t]` counts the nodes that can keep their cell on layer t. Chooses the `whole` layers that hold the most
// together, under the constraint that two of them are consecutive (t and t+1 mod the number of layers) when
// `need_pair` and whole >= 2; then, if `with_partial`, the layer of the rest that holds the most. Ties go to the lower
// layers, and among sets with a pair to the lowest pair. Greedy is optimal when its choice has a pair (always when
// more than half the layers are whole); otherwise every pair is tried with the best others, O(layers^2).
// REQUIRES: whole + (with_partial ? 1 : 0) <= held.size().
LayerChoice choose_layers(const std::vector<std::uint64_t>& held, std::uint64_t whole, bool with_partial,
                          bool need_pair);

}  // namespace gridtrain::grid
