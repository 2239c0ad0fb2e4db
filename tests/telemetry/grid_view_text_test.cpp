#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "telemetry/grid_view_text.hpp"

namespace gridtrain::telemetry {
namespace {

actors::GridView two_nodes() {
  actors::GridView s{1, 7, 2, {2, 2}, {}, 0, {}};
  actors::NodeView a;
  a.place = {0x1234, "127.0.0.1:4000", {0, 1}, {0, 1}};
  a.figures.rounds_done = 12;
  a.figures.param_mean = 1.5;
  a.figures.param_l2 = 3;
  a.param_distance = 0.25;
  actors::NodeView b;
  b.place = {0xffffffffffffff00ull, "127.0.0.1:4001", {1, 1}, {}};
  s.nodes = {a, b};
  return s;
}

}  // namespace

TEST_CASE("status JSON has the documented shape and keeps 64-bit ids exact") {
  const auto j = nlohmann::json::parse(grid_view_json(two_nodes()));
  CHECK(j["epoch"] == 1);
  CHECK(j["layout_version"] == 7);
  CHECK(j["dims"] == 2);
  CHECK(j["shape"] == nlohmann::json::array({2, 2}));
  CHECK(j["warnings"].empty());
  REQUIRE(j["nodes"].size() == 2);
  const auto& a = j["nodes"][0];
  for (const char* key : {"id", "address", "coords", "masters", "line_peers", "rounds_done", "param_mean", "param_l2",
                          "samples", "test_accuracy", "param_distance"})
    CHECK_MESSAGE(a.contains(key), key);
  CHECK(a["id"] == 0x1234);
  CHECK(a["masters"] == nlohmann::json::array({0, 1}));
  CHECK(a["param_distance"] == 0.25);
  CHECK(a["test_accuracy"] == -1);
  const auto& b = j["nodes"][1];
  CHECK(b["id"].get<std::uint64_t>() == 0xffffffffffffff00ull);
  CHECK(b["id_hex"] == "ffffffffffffff00");
  CHECK(b["param_distance"].is_null());  // not reported yet
}

TEST_CASE("line peers count the members that share a line; a member with none is warned about") {
  // 2 x 2 with (0,1) and (1,1): one line of dim 0 holds both.
  auto view = two_nodes();
  CHECK(line_peer_counts(view) == std::vector<std::size_t>{1, 1});
  CHECK(grid_view_warnings(view).empty());

  // (0,1) and (1,0) share no line: both average with nobody.
  view.nodes[1].place.coords = {1, 0};
  CHECK(line_peer_counts(view) == std::vector<std::size_t>{0, 0});
  auto warnings = grid_view_warnings(view);
  REQUIRE(warnings.size() == 2);
  CHECK(warnings[0].find("node 0000000000001234 (127.0.0.1:4000) averages with nobody") == 0);
  const auto j = nlohmann::json::parse(grid_view_json(view));
  CHECK(j["warnings"].size() == 2);
  CHECK(j["nodes"][0]["line_peers"] == 0);
  const std::string t = grid_view_table(view);
  CHECK(t.find("warning: node ffffffffffffff00") != std::string::npos);

  // A third member at (1,1) joins both lines: (0,1)-(1,1) along dim 0, (1,0)-(1,1) along dim 1.
  actors::NodeView c;
  c.place = {0x99, "127.0.0.1:4002", {1, 1}, {}};
  view.nodes.push_back(c);
  CHECK(line_peer_counts(view) == std::vector<std::size_t>{1, 1, 2});
  CHECK(grid_view_warnings(view).empty());

  // Alone, or not placed yet.
  actors::GridView one{1, 1, 1, {1}, {view.nodes[0]}, 0, {}};
  one.nodes[0].place.coords = {0};
  REQUIRE(grid_view_warnings(one).size() == 1);
  CHECK(grid_view_warnings(one)[0].find("the only member") != std::string::npos);
  view.nodes[2].place.coords.clear();
  CHECK(grid_view_warnings(view)[2].find("no place in the grid") != std::string::npos);
}

TEST_CASE("the status table has a header and one line per node") {
  const std::string t = grid_view_table(two_nodes());
  CHECK(t.find("layout version 7") != std::string::npos);
  CHECK(t.find("ADDRESS") != std::string::npos);
  CHECK(t.find("0000000000001234  127.0.0.1:4000") != std::string::npos);
  CHECK(t.find("ffffffffffffff00") != std::string::npos);
  CHECK(std::count(t.begin(), t.end(), '\n') == 4);
}

}  // namespace gridtrain::telemetry
