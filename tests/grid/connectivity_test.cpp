#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "grid/layout.hpp"
#include "grid/mixing.hpp"
#include "tests/grid/layout_checker.hpp"

using gridtrain::grid::Layout;
using gridtrain::grid::NodeId;
using gridtrain::grid::rounds_to_mean;
using gridtrain::grid::testing::connected;

namespace {

struct Case {
  std::string name;
  std::function<Layout()> make;
  int from, to;  // n, both included
};

}  // namespace

// Before the lines were required to connect, each of these left some node without a partner or the nodes in two
// groups that never averaged: every node sat on the diagonal (one layer), or one layer plus a few.
TEST_CASE("the lines connect every node for the sizes that used to leave nodes alone") {
  const std::vector<Case> cases = {
      {"fixed(2)", [] { return Layout::fixed(2); }, 2, 3},  {"fixed(3)", [] { return Layout::fixed(3); }, 2, 9},
      {"fixed(4)", [] { return Layout::fixed(4); }, 8, 8},  {"fixed(6)", [] { return Layout::fixed(6); }, 2, 70},
      {"auto(2)", [] { return Layout::automatic(2); }, 2, 70}, {"auto(4)", [] { return Layout::automatic(4); }, 2, 70},
  };
  for (const Case& c : cases) {
    for (int n = c.from; n <= c.to; ++n) {
      CAPTURE(c.name);
      CAPTURE(n);
      Layout layout = c.make();
      for (NodeId node = 1; node <= static_cast<NodeId>(n); ++node) layout.add(node);
      const std::string why = connected({layout.lines()}, layout.members());
      CHECK_MESSAGE(why.empty(), why);
      CHECK(layout.check_invariants().empty());
    }
  }
}

TEST_CASE("every shape connects every size a cluster grows through, up to 600 nodes") {
  for (int d = 1; d <= 6; ++d) {
    Layout layout = Layout::fixed(d);
    for (NodeId node = 1; node <= 600; ++node) {
      layout.add(node);
      const std::string why = connected({layout.lines()}, layout.members());
      CHECK_MESSAGE(why.empty(), "fixed(" << d << ") n " << node << ": " << why);
    }
  }
}

TEST_CASE("two nodes with grid.dims 2 average: one line of both, which reaches the mean in one round") {
  Layout layout = Layout::fixed(2);
  layout.add(1);
  layout.add(2);
  CHECK(layout.shape() == std::vector<int>{2});
  CHECK(layout.line(layout.line_of(1, 0)).members == std::vector<NodeId>{1, 2});
  const auto mixing = rounds_to_mean(layout);
  CHECK(mixing.reached);
  CHECK(mixing.rounds == 1);
}
