#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "grid/layout.hpp"
#include "tests/grid/layout_checker.hpp"

using gridtrain::grid::Layout;
using gridtrain::grid::LayoutDelta;
using gridtrain::grid::LayoutSnapshot;
using gridtrain::grid::LineId;
using gridtrain::grid::LineState;
using gridtrain::grid::NodeId;
using gridtrain::grid::testing::LayoutChecker;
using Stops = std::vector<std::pair<LineId, NodeId>>;
using Where = std::map<NodeId, std::vector<int>>;

namespace {

Where where(const Layout& layout) {
  Where out;
  for (NodeId node : layout.members()) out[node] = layout.coords(node);
  return out;
}

LayoutDelta add(LayoutChecker& checker, NodeId node) {
  LayoutDelta delta;
  const std::string why = checker.add(node, &delta);
  CHECK_MESSAGE(why.empty(), why);
  return delta;
}

LayoutDelta remove(LayoutChecker& checker, NodeId node) {
  LayoutDelta delta;
  const std::string why = checker.remove(node, &delta);
  CHECK_MESSAGE(why.empty(), why);
  return delta;
}

// A layout of fixed(2) with nodes 1..n added in order.
Layout grown(int n) {
  Layout layout = Layout::fixed(2);
  LayoutChecker checker(layout);
  for (NodeId node = 1; node <= static_cast<NodeId>(n); ++node) add(checker, node);
  return layout;
}

}  // namespace

// fixed(2) keeps one line of everybody up to n = 6 (no 2-D cube has two whole layers for 2, 3 or 5 nodes, and 2 x 2
// at n = 4 would have to give way again at n = 5), and forms the 3 x 3 at n = 7, once it has the margin. Layers of
// side s: x1 = (x0 + t) mod s; a join takes the lowest free x0 of the partial layer, or opens the lowest empty layer.
// Coordinates are written (x0, x1).
TEST_CASE("fixed(2) grows through the layouts worked out by hand for n = 1..10") {
  Layout layout = Layout::fixed(2);
  LayoutChecker checker(layout);
  struct Step {
    std::vector<int> shape;
    Where cells;
    std::vector<NodeId> moved;
  };
  const std::vector<Step> steps = {
      {{1}, {{1, {0}}}, {}},
      {{2}, {{1, {0}}, {2, {1}}}, {}},
      {{3}, {{1, {0}}, {2, {1}}, {3, {2}}}, {}},
      {{4}, {{1, {0}}, {2, {1}}, {3, {2}}, {4, {3}}}, {}},
      {{5}, {{1, {0}}, {2, {1}}, {3, {2}}, {4, {3}}, {5, {4}}}, {}},
      {{6}, {{1, {0}}, {2, {1}}, {3, {2}}, {4, {3}}, {5, {4}}, {6, {5}}}, {}},
      // Two dimensions: everyone moves. Layers 0 and 1 are whole, in coordinate order, and 7 opens layer 2.
      {{3, 3}, {{1, {0, 0}}, {2, {1, 1}}, {3, {2, 2}}, {4, {0, 1}}, {5, {1, 2}}, {6, {2, 0}}, {7, {0, 2}}},
       {1, 2, 3, 4, 5, 6}},
      {{3, 3},
       {{1, {0, 0}}, {2, {1, 1}}, {3, {2, 2}}, {4, {0, 1}}, {5, {1, 2}}, {6, {2, 0}}, {7, {0, 2}}, {8, {1, 0}}},
       {}},
      {{3, 3},
       {{1, {0, 0}},
        {2, {1, 1}},
        {3, {2, 2}},
        {4, {0, 1}},
        {5, {1, 2}},
        {6, {2, 0}},
        {7, {0, 2}},
        {8, {1, 0}},
        {9, {2, 1}}},
       {}},
      // Side 4: layers mod 4 hold {1, 2, 3}, {4, 5}, {6, 7}, {8, 9}. Layers 0 and 1 stay whole (consecutive, so
      // connected), layer 2 is partial with its 2 nodes; 8 and 9 fill (3, 3) and (2, 3), and 10 takes (3, 0).
      {{4, 4},
       {{1, {0, 0}},
        {2, {1, 1}},
        {3, {2, 2}},
        {4, {0, 1}},
        {5, {1, 2}},
        {6, {2, 0}},
        {7, {0, 2}},
        {8, {3, 3}},
        {9, {2, 3}},
        {10, {3, 0}}},
       {8, 9}},
  };
  for (std::size_t i = 0; i < steps.size(); ++i) {
    CAPTURE(i + 1);
    const LayoutDelta delta = add(checker, i + 1);
    CHECK(layout.shape() == steps[i].shape);
    CHECK(where(layout) == steps[i].cells);
    CHECK(delta.moved == steps[i].moved);
    // With d = 1 every join lengthens the line; after that only the moves to 3 x 3 and 4 x 4 reshape.
    CHECK(delta.reshaped == (i + 1 <= 7 || i + 1 == 10));
  }
  // Row x1 = 0 has held node 1 since the start (it mastered the one line of d = 1), so 1 is still its master.
  CHECK(layout.line(LineId{0, 0}) == LineState{LineId{0, 0}, {1, 6, 10}, 1});
}

TEST_CASE("fixed(3) forms 3 x 3 x 3 at n = 20; n = 28, which no connected 3-D cube holds, drops to 6 x 6 until 36") {
  Layout layout = Layout::fixed(3);
  LayoutChecker checker(layout);
  std::map<NodeId, int> dims_at;
  for (NodeId node = 1; node <= 27; ++node) {
    add(checker, node);
    dims_at[node] = layout.dims();
  }
  CHECK(dims_at[19] == 2);  // 3 x 3 x 3 needs 2 whole layers of 9, plus half a layer of margin
  CHECK(dims_at[20] == 3);
  CHECK(layout.shape() == std::vector<int>{3, 3, 3});
  std::set<std::vector<int>> cells;
  for (const auto& [node, x] : where(layout)) cells.insert(x);
  CHECK(cells.size() == 27);

  // Side 4 would hold one whole layer of 16 and 12 nodes of another: not connected. 2 dimensions, side 6, hold 4
  // whole layers of 6 and 4 nodes of a fifth.
  const LayoutDelta delta = add(checker, 28);
  CHECK(layout.shape() == std::vector<int>{6, 6});
  CHECK(delta.moved.size() == 27);
  std::multiset<std::size_t> sizes;
  for (std::uint64_t i = 0; i < 6; ++i) sizes.insert(layout.line(LineId{0, i}).members.size());
  CHECK(sizes == std::multiset<std::size_t>{4, 4, 5, 5, 5, 5});

  // 4 x 4 x 4 connects from 32 nodes (2 whole layers of 16); with half a layer of margin it takes over at 36.
  for (NodeId node = 29; node <= 36; ++node) {
    add(checker, node);
    CHECK(layout.dims() == (node < 36 ? 2 : 3));
  }
  CHECK(layout.shape() == std::vector<int>{4, 4, 4});
}

TEST_CASE("fixed(3) grows from the full 5-cube at n = 125 to side 6, keeping the nodes of three whole layers") {
  Layout layout = Layout::fixed(3);
  LayoutChecker checker(layout);
  for (NodeId node = 1; node <= 125; ++node) add(checker, node);
  CHECK(layout.shape() == std::vector<int>{5, 5, 5});
  const Where before = where(layout);

  // In the 6-cube, layer t = (x2 - x0 - x1) mod 6. The 125 inner cells split 21, 20, 21, 21, 21, 21 over layers
  // 0..5; n = 126 is three whole layers of 36 plus 18 cells of a fourth. Layers 0, 2 and 3 are kept (the most nodes,
  // ties to the lower layer; 2 and 3 are consecutive), and layer 4 is partial: its 18 lowest positions stay. So the
  // 20 + 21 nodes on layers 1 and 5 move, and 3 of layer 4: the fewest that any choice of layers allows.
  std::vector<std::size_t> held(6, 0);
  for (const auto& [node, x] : before) ++held[static_cast<std::size_t>((((x[2] - x[0] - x[1]) % 6) + 6) % 6)];
  CHECK(held == std::vector<std::size_t>{21, 20, 21, 21, 21, 21});
  const LayoutDelta delta = add(checker, 126);
  CHECK(layout.shape() == std::vector<int>{6, 6, 6});
  CHECK(delta.moved.size() == 44);
  std::vector<std::size_t> stayed(6, 0);
  for (const auto& [node, x] : before) {
    const int t = (((x[2] - x[0] - x[1]) % 6) + 6) % 6;
    const bool moved = std::binary_search(delta.moved.begin(), delta.moved.end(), node);
    CHECK(moved == (layout.coords(node) != x));
    if (!moved) ++stayed[static_cast<std::size_t>(t)];
  }
  CHECK(stayed == std::vector<std::size_t>{21, 0, 21, 21, 18, 0});
  // 126 nodes over 36 lines per dimension: 18 lines of 4 and 18 of 3.
  for (int k = 0; k < 3; ++k) {
    std::multiset<std::size_t> sizes;
    for (std::uint64_t i = 0; i < 36; ++i) sizes.insert(layout.line(LineId{k, i}).members.size());
    CHECK(sizes.count(4) == 18);
    CHECK(sizes.count(3) == 18);
  }
}

TEST_CASE("removing the last node empties the layout and stops its lines; adding after that starts over") {
  // One node needs no partner: fixed(2) holds it on a line of one dimension.
  Layout layout = Layout::fixed(2);
  LayoutChecker checker(layout);
  add(checker, 7);
  CHECK(layout.shape() == std::vector<int>{1});
  const LayoutDelta gone = remove(checker, 7);
  CHECK(layout.size() == 0);
  CHECK(layout.shape() == std::vector<int>{0});
  CHECK(layout.lines().empty());
  CHECK(gone.started.empty());
  CHECK(gone.stopped == Stops{{LineId{0, 0}, 7}});
  CHECK(gone.reshaped);

  const LayoutDelta back = add(checker, 8);
  CHECK(layout.coords(8) == std::vector<int>{0});
  CHECK(back.started == std::vector<LineState>{{LineId{0, 0}, {8}, 8}});
  CHECK(back.stopped.empty());
}

TEST_CASE("a master that leaves a whole layer, with no partial layer, hands its lines to their lowest ids") {
  Layout layout = grown(9);  // the full 3 x 3 of the hand-worked case
  LayoutChecker checker(layout);
  const LayoutDelta delta = remove(checker, 1);  // at (0, 0), master of row x1 = 0 and column x0 = 0
  CHECK(delta.moved.empty());
  CHECK(delta.stopped == Stops{{LineId{0, 0}, 1}, {LineId{1, 0}, 1}});
  CHECK(delta.started == std::vector<LineState>{{LineId{0, 0}, {8, 6}, 6}, {LineId{1, 0}, {4, 7}, 4}});
}

TEST_CASE("a leave from a whole layer pulls in a partial-layer node that shares a line with the hole") {
  Layout layout = grown(8);  // layer 2 = {7 at (0, 2), 8 at (1, 0)} is partial
  LayoutChecker checker(layout);
  // 3 at (2, 2) leaves. 7 at (0, 2) is on the hole's row x1 = 2 and masters nothing, so it fills the hole, though
  // 8 holds the higher position: three lines change instead of four. 3 mastered row 2 and column x0 = 2.
  const LayoutDelta delta = remove(checker, 3);
  CHECK(delta.moved == std::vector<NodeId>{7});
  CHECK(layout.coords(7) == std::vector<int>{2, 2});
  CHECK(delta.stopped == Stops{{LineId{0, 2}, 3}, {LineId{1, 2}, 3}});
  CHECK(delta.started == std::vector<LineState>{{LineId{0, 2}, {5, 7}, 5},
                                                {LineId{1, 0}, {1, 4}, 1},
                                                {LineId{1, 2}, {6, 7}, 6}});
}

TEST_CASE("a partial-layer node that masters no line is preferred to fill a hole") {
  Layout layout = Layout::fixed(2);
  LayoutChecker checker(layout);
  // The 3 x 3 forms at the seventh join and places the first six in join order, as in the hand-worked case:
  // 2 (0,0), 1 (1,1), 9 (2,2), 8 (0,1), 3 (1,2), 5 (2,0), 7 (0,2); then 4 (1,0), 6 (2,1). Row x1 = 2 was
  // appointed then from {9, 3, 7}: 3 masters it; row 1 went to 1 and column 0 to 2.
  for (NodeId node : {2, 1, 9, 8, 3, 5, 7, 4, 6}) add(checker, node);
  CHECK(remove(checker, 5).moved.empty());  // the cube was full: layer 1 just becomes partial, {8, 3}
  // 7 at (0, 2) leaves layer 2. Both of the hole's lines meet layer 1 at a node: 3 on row 2, a master, and 8 on
  // column 0, which masters nothing. 8 moves; 7 mastered nothing, so no line stops.
  const LayoutDelta delta = remove(checker, 7);
  CHECK(delta.moved == std::vector<NodeId>{8});
  CHECK(layout.coords(8) == std::vector<int>{0, 2});
  CHECK(delta.stopped.empty());
  CHECK(delta.started == std::vector<LineState>{{LineId{0, 1}, {1, 6}, 1},
                                                {LineId{0, 2}, {8, 3, 9}, 3},
                                                {LineId{1, 0}, {2, 8}, 2}});
}

TEST_CASE("a master that leaves a whole layer while another is partial hands its lines to their lowest ids") {
  Layout layout = grown(8);
  LayoutChecker checker(layout);
  // Node 1 at (0, 0) leaves. 8 at (1, 0) sits on the hole's row and masters nothing, so it moves into (0, 0).
  const LayoutDelta delta = remove(checker, 1);
  CHECK(delta.moved == std::vector<NodeId>{8});
  CHECK(layout.coords(8) == std::vector<int>{0, 0});
  CHECK(delta.stopped == Stops{{LineId{0, 0}, 1}, {LineId{1, 0}, 1}});
  CHECK(delta.started == std::vector<LineState>{{LineId{0, 0}, {8, 6}, 6},
                                                {LineId{1, 0}, {8, 4, 7}, 4},
                                                {LineId{1, 1}, {2, 5}, 2}});
}

TEST_CASE("removing the last-filled node moves no one and keeps every master") {
  Layout layout = grown(8);
  LayoutChecker checker(layout);
  const LayoutDelta delta = remove(checker, 8);  // at (1, 0), in the partial layer
  CHECK(delta.moved.empty());
  CHECK(delta.stopped.empty());
  CHECK(delta.started == std::vector<LineState>{{LineId{0, 0}, {1, 6}, 1}, {LineId{1, 1}, {2, 5}, 2}});
}

TEST_CASE("with no partial layer, a leave from the only consecutive pair of whole layers refills from another") {
  Layout layout = grown(12);  // 4 x 4, layers 0, 1 and 2 whole, 3 empty
  LayoutChecker checker(layout);
  CHECK(layout.shape() == std::vector<int>{4, 4});
  SUBCASE("a leave from layer 0 leaves 1 and 2 consecutive: layer 0 becomes partial, no one moves") {
    CHECK(remove(checker, 1).moved.empty());  // at (0, 0)
  }
  SUBCASE("a leave from layer 1 would leave 0 and 2, which split the lines in two: layer 2 gives a node") {
    // 4 at (0, 1) leaves. Layer 0's nodes on its lines, 1 and 2, master lines; layer 2's, 12 at (3, 1), does not.
    const LayoutDelta delta = remove(checker, 4);
    CHECK(delta.moved == std::vector<NodeId>{12});
    CHECK(layout.coords(12) == std::vector<int>{0, 1});
  }
}

TEST_CASE("a removed id can be added again and gets a cell like any newcomer") {
  Layout layout = grown(8);
  LayoutChecker checker(layout);
  remove(checker, 5);  // (1, 2) in whole layer 1, so 7 or 8 of the partial layer fills it
  add(checker, 5);
  CHECK(layout.contains(5));
  CHECK(layout.size() == 8);
  CHECK(layout.check_invariants().empty());
}

TEST_CASE("joins and leaves just above a full cube do not resize back and forth") {
  Layout layout = grown(10);  // side 4
  LayoutChecker checker(layout);
  for (int i = 0; i < 5; ++i) {
    CHECK_FALSE(remove(checker, 10).reshaped);  // n = 9 stays in the 4 x 4: it shrinks only at n <= 9 - 1
    CHECK_FALSE(add(checker, 10).reshaped);
  }
  remove(checker, 10);
  CHECK(layout.side() == 4);
  const LayoutDelta shrink = remove(checker, 9);  // n = 8 <= 3^2 - 3/2
  CHECK(shrink.reshaped);
  CHECK(layout.side() == 3);
}

TEST_CASE("d = 1 is one line of everybody and never moves anyone") {
  Layout layout = Layout::fixed(1);
  LayoutChecker checker(layout);
  for (NodeId node = 1; node <= 5; ++node) CHECK(add(checker, node).moved.empty());
  CHECK(remove(checker, 3).moved.empty());
  CHECK(layout.shape() == std::vector<int>{5});
  CHECK_FALSE(remove(checker, 2).reshaped);
  CHECK(remove(checker, 5).reshaped);  // the last coordinate empties: the side drops to 4
  CHECK(layout.shape() == std::vector<int>{4});
  add(checker, 6);                     // takes the lowest free coordinate, 1
  CHECK(layout.coords(6) == std::vector<int>{1});
  CHECK(layout.line(LineId{0, 0}) == LineState{LineId{0, 0}, {1, 6, 4}, 1});
}

TEST_CASE("automatic dimensions keep lines within max_line and step down with hysteresis") {
  Layout layout = Layout::automatic(16);
  LayoutChecker checker(layout);
  std::map<int, int> dims_up;
  for (NodeId node = 1; node <= 300; ++node) {
    const LayoutDelta delta = add(checker, node);
    dims_up[static_cast<int>(node)] = layout.dims();
    if (node == 17 || node == 257) CHECK(delta.moved.size() == node - 1);  // a change of dimensions moves all
  }
  CHECK(dims_up[16] == 1);
  CHECK(dims_up[17] == 2);
  CHECK(dims_up[256] == 2);
  CHECK(dims_up[257] == 3);
  CHECK(layout.shape() == std::vector<int>{7, 7, 7});
  std::map<int, int> dims_down;  // n -> dims on the way down
  for (NodeId node = 300; node >= 1; --node) {
    remove(checker, node);
    dims_down[static_cast<int>(layout.size())] = layout.dims();
  }
  CHECK(dims_down[129] == 3);  // 3 dims hold on until n <= 16^2 / 2
  CHECK(dims_down[128] == 2);
  CHECK(dims_down[9] == 2);
  CHECK(dims_down[8] == 1);
  CHECK(dims_down[0] == 1);
}

TEST_CASE("with a small max_line, connectivity wins over line length") {
  Layout layout = Layout::automatic(4);
  LayoutChecker checker(layout);
  std::map<int, std::vector<int>> shape_at;
  for (NodeId node = 1; node <= 20; ++node) {
    add(checker, node);
    shape_at[static_cast<int>(node)] = layout.shape();
  }
  // 5 and 6 nodes fit 3 x 3 (lines of 2) but hold one whole layer there, so some would be alone: one line of all.
  CHECK(shape_at[5] == std::vector<int>{5});
  CHECK(shape_at[6] == std::vector<int>{6});
  CHECK(shape_at[7] == std::vector<int>{3, 3});
  // 17 nodes need 3 dimensions for lines of 4 at most by side, but 3 x 3 x 3 connects only from 18: 5 x 5 holds
  // them on lines of 3 and 4, within max_line after all. 3 x 3 x 3 takes over once it has its margin.
  CHECK(shape_at[16] == std::vector<int>{4, 4});
  CHECK(shape_at[17] == std::vector<int>{5, 5});
  CHECK(shape_at[19] == std::vector<int>{5, 5});
  CHECK(shape_at[20] == std::vector<int>{3, 3, 3});
}

TEST_CASE("a restored snapshot is the same layout and answers later operations the same way") {
  Layout layout = Layout::fixed(3);
  LayoutChecker checker(layout);
  for (NodeId node = 1; node <= 40; ++node) add(checker, node);
  for (NodeId node = 2; node <= 40; node += 3) remove(checker, node);
  auto restored = Layout::restore(layout.snapshot());
  REQUIRE(restored.ok());
  Layout copy = std::move(restored).value();
  CHECK(copy.snapshot() == layout.snapshot());
  for (NodeId node = 1; node <= 40; node += 3) {
    const LayoutDelta a = layout.remove(node);
    const LayoutDelta b = copy.remove(node);
    CHECK(a.started == b.started);
    CHECK(a.stopped == b.stopped);
    CHECK(a.moved == b.moved);
  }
  CHECK(copy.snapshot() == layout.snapshot());
}

TEST_CASE("restore refuses a snapshot that is not a valid layout") {
  const Layout layout = grown(7);  // 1 (0,0), 2 (1,1), 3 (2,2), 4 (0,1), 5 (1,2), 6 (2,0), 7 (0,2)
  LayoutSnapshot shared = layout.snapshot();
  shared.placements[1].second = shared.placements[0].second;
  CHECK_FALSE(Layout::restore(shared).ok());

  LayoutSnapshot unbalanced = layout.snapshot();
  unbalanced.placements[0].second = {2, 1};  // row x1 = 1 would hold 3 while row x1 = 0 holds 1
  CHECK_FALSE(Layout::restore(unbalanced).ok());

  LayoutSnapshot stranger = layout.snapshot();
  stranger.masters[0].second = 99;
  CHECK_FALSE(Layout::restore(stranger).ok());

  // Balanced, but the whole layers 0 and 2 of side 4 are not consecutive: the lines split the nodes in two (the
  // partial layer's two nodes join only some of them).
  LayoutSnapshot split{2, 0, 2, 4, {}, {}};
  NodeId next = 1;
  for (const int t : {0, 2}) {
    for (int x0 = 0; x0 < 4; ++x0) split.placements.push_back({next++, {x0, (x0 + t) % 4}});
  }
  split.placements.push_back({next++, {0, 1}});
  split.placements.push_back({next++, {1, 2}});
  std::map<LineId, NodeId> lowest;  // row x1 is line (0, x1), column x0 is line (1, x0)
  for (const auto& [node, x] : split.placements) {
    for (const LineId id : {LineId{0, static_cast<std::uint64_t>(x[1])}, LineId{1, static_cast<std::uint64_t>(x[0])}}) {
      lowest.emplace(id, node);  // placements ascend, so the first is the lowest
    }
  }
  split.masters.assign(lowest.begin(), lowest.end());
  const auto refused = Layout::restore(split);
  REQUIRE_FALSE(refused.ok());
  const std::string why = refused.error().message;
  CHECK_MESSAGE(why.find("consecutive") != std::string::npos, why);

  // fixed(2) keeps 8 nodes on 3 x 3, which is steady there: one line of all is not its layout.
  Layout line = Layout::fixed(1);
  for (NodeId node = 1; node <= 8; ++node) line.add(node);
  LayoutSnapshot flat = line.snapshot();
  flat.fixed_dims = 2;
  CHECK_FALSE(Layout::restore(flat).ok());
}
