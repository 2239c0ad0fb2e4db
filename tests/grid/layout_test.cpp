#include <doctest/doctest.h>

#include <map>
#include <set>
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

// A layout of d = 2 with nodes 1..n added in order.
Layout grown(int n) {
  Layout layout = Layout::fixed(2);
  LayoutChecker checker(layout);
  for (NodeId node = 1; node <= static_cast<NodeId>(n); ++node) add(checker, node);
  return layout;
}

}  // namespace

// Layers of side s: x1 = (x0 + t) mod s; a join takes the lowest free x0 of the partial layer, or opens the lowest
// empty layer. Coordinates are written (x0, x1).
TEST_CASE("d = 2 grows through the layouts worked out by hand for n = 1..10") {
  Layout layout = Layout::fixed(2);
  LayoutChecker checker(layout);
  struct Step {
    std::vector<int> shape;
    Where cells;
    std::vector<NodeId> moved;
  };
  const std::vector<Step> steps = {
      {{1, 1}, {{1, {0, 0}}}, {}},
      // Side 2, layer 0 is the diagonal: 2 fills it.
      {{2, 2}, {{1, {0, 0}}, {2, {1, 1}}}, {}},
      {{2, 2}, {{1, {0, 0}}, {2, {1, 1}}, {3, {0, 1}}}, {}},
      {{2, 2}, {{1, {0, 0}}, {2, {1, 1}}, {3, {0, 1}}, {4, {1, 0}}}, {}},
      // Side 3: layers mod 3 hold {1, 2} (t = 0), {3} (t = 1), {4} (t = 2). Layer 0 stays whole, layer 1 is
      // partial with 2 cells; 4 moves into (2, 2), the free cell of layer 0, and 5 takes (1, 2) of layer 1.
      {{3, 3}, {{1, {0, 0}}, {2, {1, 1}}, {3, {0, 1}}, {4, {2, 2}}, {5, {1, 2}}}, {4}},
      {{3, 3}, {{1, {0, 0}}, {2, {1, 1}}, {3, {0, 1}}, {4, {2, 2}}, {5, {1, 2}}, {6, {2, 0}}}, {}},
      {{3, 3}, {{1, {0, 0}}, {2, {1, 1}}, {3, {0, 1}}, {4, {2, 2}}, {5, {1, 2}}, {6, {2, 0}}, {7, {0, 2}}}, {}},
      {{3, 3},
       {{1, {0, 0}}, {2, {1, 1}}, {3, {0, 1}}, {4, {2, 2}}, {5, {1, 2}}, {6, {2, 0}}, {7, {0, 2}}, {8, {1, 0}}},
       {}},
      {{3, 3},
       {{1, {0, 0}},
        {2, {1, 1}},
        {3, {0, 1}},
        {4, {2, 2}},
        {5, {1, 2}},
        {6, {2, 0}},
        {7, {0, 2}},
        {8, {1, 0}},
        {9, {2, 1}}},
       {}},
      // Side 4: layers mod 4 hold {1, 2, 4}, {3, 5}, {6, 7}, {8, 9}. Layers 0 and 1 stay whole, layer 2 partial
      // with its 2 nodes; 8 and 9 fill (3, 3) and (2, 3), and 10 takes (3, 0).
      {{4, 4},
       {{1, {0, 0}},
        {2, {1, 1}},
        {3, {0, 1}},
        {4, {2, 2}},
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
    CHECK(delta.reshaped == (i + 1 == 1 || i + 1 == 2 || i + 1 == 5 || i + 1 == 10));
  }
  // Row x1 = 0 has held node 1 since the start, so 1 is still its master.
  CHECK(layout.line(LineId{0, 0}) == LineState{LineId{0, 0}, {1, 6, 10}, 1});
}

TEST_CASE("d = 3 fills the cube at n = 27, and n = 28 keeps the 14 nodes on layers 0 and 2 of the 4-cube") {
  Layout layout = Layout::fixed(3);
  LayoutChecker checker(layout);
  for (NodeId node = 1; node <= 27; ++node) add(checker, node);
  CHECK(layout.shape() == std::vector<int>{3, 3, 3});
  std::set<std::vector<int>> cells;
  for (const auto& [node, x] : where(layout)) cells.insert(x);
  CHECK(cells.size() == 27);
  const Where before = where(layout);

  // In the 4-cube, layer t = (x2 - x0 - x1) mod 4. The 27 inner cells split 7, 6, 7, 7 over layers 0..3; n = 28
  // is one whole layer of 16 plus 12 cells of another. Layers 0 and 2 are kept (ties go to the lower layer), so the
  // 6 + 7 nodes on layers 1 and 3 move: first into layer 0's 9 outer cells, then into layer 2's lowest free
  // positions. Node 28 takes the last cell, (3, 2, 3).
  const LayoutDelta delta = add(checker, 28);
  CHECK(layout.shape() == std::vector<int>{4, 4, 4});
  std::vector<NodeId> expect_moved;
  for (const auto& [node, x] : before) {
    const int t = (((x[2] - x[0] - x[1]) % 4) + 4) % 4;
    if (t == 1 || t == 3) expect_moved.push_back(node);
    if (t == 0 || t == 2) CHECK(layout.coords(node) == x);
  }
  CHECK(expect_moved.size() == 13);
  CHECK(delta.moved == expect_moved);
  CHECK(layout.coords(28) == std::vector<int>{3, 2, 3});

  std::set<std::vector<int>> expect_cells;
  for (int x0 = 0; x0 < 4; ++x0) {
    for (int x1 = 0; x1 < 4; ++x1) expect_cells.insert({x0, x1, (x0 + x1) % 4});
  }
  for (const std::vector<int>& x : std::vector<std::vector<int>>{{0, 0, 2}, {2, 0, 0}, {1, 1, 0}, {2, 1, 1},
                                                                 {0, 2, 0}, {1, 2, 1}, {2, 2, 2}, {1, 0, 3},
                                                                 {3, 0, 1}, {0, 1, 3}, {3, 1, 2}, {3, 2, 3}}) {
    expect_cells.insert(x);
  }
  cells.clear();
  for (const auto& [node, x] : where(layout)) cells.insert(x);
  CHECK(cells == expect_cells);
  // 28 nodes over 16 lines per dimension: 12 lines of 2 and 4 of 1.
  for (int k = 0; k < 3; ++k) {
    std::multiset<std::size_t> sizes;
    for (std::uint64_t i = 0; i < 16; ++i) sizes.insert(layout.line(LineId{k, i}).members.size());
    CHECK(sizes.count(2) == 12);
    CHECK(sizes.count(1) == 4);
  }
}

TEST_CASE("removing the last node empties the layout and stops its lines; adding after that starts over") {
  Layout layout = Layout::fixed(2);
  LayoutChecker checker(layout);
  add(checker, 7);
  const LayoutDelta gone = remove(checker, 7);
  CHECK(layout.size() == 0);
  CHECK(layout.shape() == std::vector<int>{0, 0});
  CHECK(layout.lines().empty());
  CHECK(gone.started.empty());
  CHECK(gone.stopped == Stops{{LineId{0, 0}, 7}, {LineId{1, 0}, 7}});
  CHECK(gone.reshaped);

  const LayoutDelta back = add(checker, 8);
  CHECK(layout.coords(8) == std::vector<int>{0, 0});
  CHECK(back.started == std::vector<LineState>{{LineId{0, 0}, {8}, 8}, {LineId{1, 0}, {8}, 8}});
  CHECK(back.stopped.empty());
}

TEST_CASE("a master that leaves a whole layer, with no partial layer, hands its lines to their lowest ids") {
  Layout layout = grown(9);  // the full 3 x 3 of the hand-worked case
  LayoutChecker checker(layout);
  const LayoutDelta delta = remove(checker, 1);  // at (0, 0), master of row x1 = 0 and column x0 = 0
  CHECK(delta.moved.empty());
  CHECK(delta.stopped == Stops{{LineId{0, 0}, 1}, {LineId{1, 0}, 1}});
  CHECK(delta.started == std::vector<LineState>{{LineId{0, 0}, {8, 6}, 6}, {LineId{1, 0}, {3, 7}, 3}});
}

TEST_CASE("a leave from a whole layer pulls in a partial-layer node that shares a line with the hole") {
  Layout layout = grown(8);  // layer 2 = {7 at (0, 2), 8 at (1, 0)} is partial
  LayoutChecker checker(layout);
  // 4 at (2, 2) leaves. 7 at (0, 2) is on the hole's row x1 = 2 and masters nothing, so it fills the hole, though
  // 8 holds the higher position: three lines change instead of four. 4 mastered row 2 and column x0 = 2.
  const LayoutDelta delta = remove(checker, 4);
  CHECK(delta.moved == std::vector<NodeId>{7});
  CHECK(layout.coords(7) == std::vector<int>{2, 2});
  CHECK(delta.stopped == Stops{{LineId{0, 2}, 4}, {LineId{1, 2}, 4}});
  CHECK(delta.started == std::vector<LineState>{{LineId{0, 2}, {5, 7}, 5},
                                                {LineId{1, 0}, {1, 3}, 1},
                                                {LineId{1, 2}, {6, 7}, 6}});
}

TEST_CASE("a partial-layer node that masters no line is preferred to fill a hole") {
  Layout layout = Layout::fixed(2);
  LayoutChecker checker(layout);
  // The join order of the hand-worked case gives 6 (0,0), 11 (1,1), 10 (0,1), 9 (2,2), 4 (1,2), 5 (2,0), 1 (0,2),
  // 8 (1,0), 7 (2,1). Row x1 = 2 was appointed at the resize to side 3 from {4, 9}: 4 masters it.
  for (NodeId node : {6, 11, 10, 9, 4, 5, 1, 8, 7}) add(checker, node);
  CHECK(remove(checker, 5).moved.empty());  // the cube was full: layer 1 just becomes partial, {10, 4}
  // 1 at (0, 2) leaves layer 2. Both of the hole's lines meet layer 1 at a node: 4 on row 2, a master, and 10 on
  // column 0, which masters nothing. 10 moves; 1 mastered nothing, so no line stops.
  const LayoutDelta delta = remove(checker, 1);
  CHECK(delta.moved == std::vector<NodeId>{10});
  CHECK(layout.coords(10) == std::vector<int>{0, 2});
  CHECK(delta.stopped.empty());
  CHECK(delta.started == std::vector<LineState>{{LineId{0, 1}, {11, 7}, 11},
                                                {LineId{0, 2}, {10, 4, 9}, 4},
                                                {LineId{1, 0}, {6, 10}, 6}});
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
                                                {LineId{1, 0}, {8, 3, 7}, 3},
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
  Layout layout = Layout::automatic(4);
  LayoutChecker checker(layout);
  std::vector<int> dims_at(18, 0);
  for (NodeId node = 1; node <= 17; ++node) {
    const LayoutDelta delta = add(checker, node);
    dims_at[node] = layout.dims();
    if (node == 5 || node == 17) CHECK(delta.moved.size() == node - 1);  // a change of dimensions moves all
  }
  CHECK(dims_at[4] == 1);
  CHECK(dims_at[5] == 2);
  CHECK(dims_at[16] == 2);
  CHECK(dims_at[17] == 3);
  CHECK(layout.shape() == std::vector<int>{3, 3, 3});
  std::map<int, int> dims_down;  // n -> dims on the way down
  for (NodeId node = 17; node >= 1; --node) {
    remove(checker, node);
    dims_down[static_cast<int>(layout.size())] = layout.dims();
  }
  CHECK(dims_down[9] == 3);  // 3 dims hold on until n <= 4^2 / 2
  CHECK(dims_down[8] == 2);
  CHECK(dims_down[3] == 2);
  CHECK(dims_down[2] == 1);
  CHECK(dims_down[0] == 1);
}

TEST_CASE("a restored snapshot is the same layout and answers later operations the same way") {
  Layout layout = Layout::fixed(3);
  LayoutChecker checker(layout);
  for (NodeId node = 1; node <= 40; ++node) add(checker, node);
  for (NodeId node = 2; node <= 40; node += 3) remove(checker, node);
  Layout copy = Layout::fixed(1);
  REQUIRE(Layout::restore(layout.snapshot(), copy).empty());
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
  const Layout layout = grown(5);
  Layout out = Layout::fixed(2);
  LayoutSnapshot shared = layout.snapshot();
  shared.placements[1].second = shared.placements[0].second;
  CHECK_FALSE(Layout::restore(shared, out).empty());

  LayoutSnapshot unbalanced = layout.snapshot();  // 1 (0,0), 2 (1,1), 3 (0,1), 4 (2,2), 5 (1,2)
  unbalanced.placements[3].second = {0, 2};        // row x0 = 0 would hold 3 while x0 = 2 holds none
  CHECK_FALSE(Layout::restore(unbalanced, out).empty());

  LayoutSnapshot stranger = layout.snapshot();
  stranger.masters[0].second = 99;
  CHECK_FALSE(Layout::restore(stranger, out).empty());
  CHECK(out.size() == 0);  // untouched by the failed restores
}
