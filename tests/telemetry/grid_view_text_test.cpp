#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "telemetry/grid_view_text.hpp"

namespace gridtrain::telemetry {
namespace {

actors::GridView two_nodes() {
  actors::GridView s{1, 7, 2, {2, 2}, {}};
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
  REQUIRE(j["nodes"].size() == 2);
  const auto& a = j["nodes"][0];
  for (const char* key : {"id", "address", "coords", "masters", "rounds_done", "param_mean", "param_l2", "samples",
                          "test_accuracy", "param_distance"})
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

TEST_CASE("the status table has a header and one line per node") {
  const std::string t = grid_view_table(two_nodes());
  CHECK(t.find("layout version 7") != std::string::npos);
  CHECK(t.find("ADDRESS") != std::string::npos);
  CHECK(t.find("0000000000001234  127.0.0.1:4000") != std::string::npos);
  CHECK(t.find("ffffffffffffff00") != std::string::npos);
  CHECK(std::count(t.begin(), t.end(), '\n') == 4);
}

}  // namespace gridtrain::telemetry
