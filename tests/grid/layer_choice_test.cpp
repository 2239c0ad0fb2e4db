#include <doctest/doctest.h>

#include <vector>

#include "grid/layer_choice.hpp"

using gridtrain::grid::choose_layers;
using gridtrain::grid::has_consecutive_pair;

TEST_CASE("a reshape keeps the layers that hold the most nodes, two of them consecutive") {
  using Whole = std::vector<char>;
  // Greedy when its choice has a pair: layers 1 and 2 hold the most, and are consecutive.
  auto c = choose_layers({3, 9, 8, 1}, 2, true, true);
  CHECK(c.whole == Whole{0, 1, 1, 0});
  CHECK(c.partial == 0);
  // Layers 0 and 2 hold the most but, of side 4, split the lines in two. The best sets with a pair keep 9 + 6 = 15
  // (pairs 0-1 and 3-0 tie at 9 + 6; the lower pair wins); the partial layer is the best of the rest.
  c = choose_layers({9, 6, 9, 6}, 2, true, true);
  CHECK(c.whole == Whole{1, 1, 0, 0});
  CHECK(c.partial == 2);
  c = choose_layers({9, 2, 9, 6}, 2, false, true);
  CHECK(c.whole == Whole{0, 0, 1, 1});
  CHECK(c.partial == -1);
  // Without the pair (d = 1 has one cell per layer), or with one whole layer, greedy stands.
  CHECK(choose_layers({9, 6, 9, 6}, 2, false, false).whole == Whole{1, 0, 1, 0});
  CHECK(choose_layers({9, 6, 9, 6}, 1, true, true).whole == Whole{1, 0, 0, 0});
  // With more than half the layers whole, greedy always has a pair.
  CHECK(choose_layers({5, 0, 5, 0, 5}, 3, false, true).whole == Whole{1, 0, 1, 0, 1});
}

TEST_CASE("consecutive pairs wrap around the last layer") {
  CHECK(has_consecutive_pair({1, 0, 0, 1}));
  CHECK(has_consecutive_pair({0, 1, 1, 0}));
  CHECK_FALSE(has_consecutive_pair({1, 0, 1, 0}));
  CHECK_FALSE(has_consecutive_pair({1}));
  CHECK(has_consecutive_pair({1, 1}));
}
