#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "actors/status.hpp"

namespace gridtrain::actors {
namespace {

ClusterStatus two_nodes() {
  ClusterStatus s{1, 7, 2, {2, 2}, {}};
  NodeStatus a;
  a.id = 0x1234;
  a.address = "127.0.0.1:4000";
  a.coords = {0, 1};
  a.masters = {0, 1};
  a.rounds_done = 12;
  a.param_mean = 1.5;
  a.param_l2 = 3;
  a.param_distance = 0.25;
  NodeStatus b;
  b.id = 0xffffffffffffff00ull;
  b.address = "127.0.0.1:4001";
  b.coords = {1, 1};
  s.nodes = {a, b};
  return s;
}

}  // namespace

TEST_CASE("status JSON has the documented shape and keeps 64-bit ids exact") {
  const auto j = nlohmann::json::parse(to_json(two_nodes()));
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
  const std::string t = to_table(two_nodes());
  CHECK(t.find("layout version 7") != std::string::npos);
  CHECK(t.find("ADDRESS") != std::string::npos);
  CHECK(t.find("0000000000001234  127.0.0.1:4000") != std::string::npos);
  CHECK(t.find("ffffffffffffff00") != std::string::npos);
  CHECK(std::count(t.begin(), t.end(), '\n') == 4);
}

TEST_CASE("report samples cover the model evenly, and are the whole model when it is small") {
  CHECK(report_sample_indices(5) == std::vector<std::size_t>{0, 1, 2, 3, 4});
  const auto big = report_sample_indices(1024);
  REQUIRE(big.size() == max_report_sample);
  CHECK(big[1] == 4);
  CHECK(big.back() == 1020);
  CHECK(report_sample_indices(0).empty());
}

TEST_CASE("the distance to the cluster mean is exact for a small model, and unknown without a report") {
  const std::vector<float> a{0, 0}, b{2, 4};
  const auto d = param_distances({&a, &b, nullptr}, 2);
  // The mean is (1, 2); each node is sqrt(1 + 4) away.
  CHECK(d[0] == doctest::Approx(std::sqrt(5.0)));
  CHECK(d[1] == doctest::Approx(std::sqrt(5.0)));
  CHECK(d[2] < 0);
}

TEST_CASE("the distance estimate scales a sample of a large model to the whole model") {
  // 1024 floats, sampled at 256 of them; node a is 0 everywhere and node b 2 everywhere: each is 1 from the mean
  // in every coordinate, sqrt(1024) = 32 in all.
  const std::vector<float> a(256, 0.0f), b(256, 2.0f);
  const auto d = param_distances({&a, &b}, 1024);
  CHECK(d[0] == doctest::Approx(32.0));
  CHECK(d[1] == doctest::Approx(32.0));
}

}  // namespace gridtrain::actors
