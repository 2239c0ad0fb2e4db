// HostedNode, the node the Python module drives: its errors as gridnode's exit codes, two hosted nodes averaging a
// deferred store (the model moves only where the host applies), and an end from another thread than the one that
// made it (CAF 0.17's ~actor_system once waited for ever there: docs/design.md, "The PyTorch front end").

#include "python/hosted_node.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "tests/config/temp_dir.hpp"

using gridtrain::config::testing::TempDir;
using gridtrain::python::Failure;
using gridtrain::python::HostedNode;
using namespace std::chrono_literals;

namespace {

constexpr const char* kConfig = "cluster:\n  listen: 127.0.0.1:0\nallreduce:\n  elastic_rate: 0.5\n";

gridtrain::app::RunArgs args_for(const std::string& config, const std::string& seed = "") {
  gridtrain::app::RunArgs args;
  args.config_file = config;
  args.seed_address = seed;
  args.overrides = {"metrics.log_level=warn"};
  return args;
}

int failure_code(const std::function<void()>& fn, std::string* message = nullptr) {
  try {
    fn();
  } catch (const Failure& f) {
    if (message) *message = f.what();
    return f.code();
  }
  return 0;
}

}  // namespace

TEST_CASE("a hosted node's bad input fails with gridnode's exit code 2 and its file:line:col") {
  TempDir dir;
  const std::string bad = dir.write("bad.yaml", "grid:\n  dims: 9\n").string();
  std::string message;
  CHECK(failure_code([&] { HostedNode node(args_for(bad)); }, &message) == 2);
  CHECK(message.rfind(bad + ":2:9: grid.dims: ", 0) == 0);
  const std::string good = dir.write("good.yaml", kConfig).string();
  auto args = args_for(good);
  args.overrides.push_back("learner.kind=probe");
  CHECK(failure_code([&] { HostedNode node(args); }, &message) == 2);
  CHECK(message.find("learner.kind must be external") != std::string::npos);
  HostedNode node(args_for(good));
  CHECK(failure_code([&] { node.make_model({}); }) == 2);
  CHECK(failure_code([&] { node.join(); }) == 1);  // no model yet
}

TEST_CASE("two hosted nodes average a deferred store, which moves only where the host applies the pulls") {
  TempDir dir;
  const std::string config = dir.write("cluster.yaml", kConfig).string();
  HostedNode a(args_for(config));
  auto a_store = a.make_model({{"w", {64}}, {"b", {3}}});
  a.join();
  REQUIRE(a.joined());
  HostedNode b(args_for(config, a.address()));
  auto b_store = b.make_model({{"w", {64}}, {"b", {3}}});
  b.join();
  auto a_model = a_store->owner_arena();
  auto b_model = b_store->owner_arena();
  std::fill(a_model.begin(), a_model.end(), 0.0f);
  b_store->apply_deferred();  // the warm start (a's model, as a pending update) first
  std::fill(b_model.begin(), b_model.end(), 10.0f);
  int moved_outside_apply = 0;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::vector<float> before(b_model.begin(), b_model.end());
    std::this_thread::sleep_for(2ms);
    if (!std::equal(before.begin(), before.end(), b_model.begin())) ++moved_outside_apply;
    a_store->apply_deferred();
    b_store->apply_deferred();
    a.step(1);
    b.step(1);
    if (std::abs(a_model[0] - 5.0f) < 1e-3f && std::abs(b_model[66] - 5.0f) < 1e-3f) break;
  }
  CHECK(moved_outside_apply == 0);
  CHECK(a_model[0] == doctest::Approx(5.0f).epsilon(1e-3));
  CHECK(b_model[66] == doctest::Approx(5.0f).epsilon(1e-3));
  CHECK(a.stats().total().rounds_done > 0);
  // One shard per member, by id: the two nodes take the two parts (as each heard of the other: within a refresh).
  const auto both = std::chrono::steady_clock::now() + 10s;
  while ((a.data_shard().second != 2 || b.data_shard().second != 2) && std::chrono::steady_clock::now() < both)
    std::this_thread::sleep_for(50ms);
  const auto [a_index, a_count] = a.data_shard();
  const auto [b_index, b_count] = b.data_shard();
  CHECK(a_count == 2);
  CHECK(b_count == 2);
  CHECK(a_index + b_index == 1);
  CHECK((a_index == 0) == (a.id() < b.id()));
  b.close();
  CHECK(failure_code([&] { b.data_shard(); }) == 1);
  const auto shrunk = std::chrono::steady_clock::now() + 10s;  // a hears of b's leave with its next state
  while (a.data_shard().second != 1 && std::chrono::steady_clock::now() < shrunk) std::this_thread::sleep_for(50ms);
  CHECK(a.data_shard() == std::pair<std::size_t, std::size_t>{0, 1});
  a.close();
}

TEST_CASE("after wait_for_members, the first data_shard() counts every member waited for") {
  // Three nodes wait for three: each must cut the first epoch in three at once, not after its next background
  // read, or the one that saw fewer takes a larger part and lags the others for the rest of the run.
  TempDir dir;
  const std::string config = dir.write("cluster.yaml", kConfig).string();
  std::vector<std::unique_ptr<HostedNode>> nodes;
  std::vector<std::thread> waiting;
  std::vector<std::pair<std::size_t, std::size_t>> shards(3);
  std::vector<int> codes(3, -1);
  for (int i = 0; i < 3; ++i) {
    auto args = args_for(config, i == 0 ? "" : nodes[0]->address());
    args.wait_members = 3;
    nodes.push_back(std::make_unique<HostedNode>(args));
    nodes.back()->make_model({{"w", {16}}});
    nodes.back()->join();
    waiting.emplace_back([&, i] {
      codes[i] = failure_code([&] {
        nodes[i]->wait_for_members({});
        shards[i] = nodes[i]->data_shard();
      });
    });
  }
  for (auto& t : waiting) t.join();
  std::vector<std::size_t> indexes;
  for (int i = 0; i < 3; ++i) {
    CHECK(codes[i] == 0);
    CHECK(shards[i].second == 3);
    indexes.push_back(shards[i].first);
  }
  std::sort(indexes.begin(), indexes.end());
  CHECK(indexes == std::vector<std::size_t>{0, 1, 2});
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) (*it)->close();  // the GridMaster's last
}

TEST_CASE("another model is refused with exit code 3; a node closed from another thread ends at once") {
  TempDir dir;
  const std::string config = dir.write("cluster.yaml", kConfig).string();
  HostedNode a(args_for(config));
  a.make_model({{"w", {8}}});
  a.join();
  {
    HostedNode other(args_for(config, a.address()));
    other.make_model({{"w", {9}}});
    std::string message;
    CHECK(failure_code([&] { other.join(); }, &message) == 3);
    CHECK(message.find("a different model") != std::string::npos);
  }
  HostedNode b(args_for(config, a.address()));
  b.make_model({{"w", {8}}});
  b.join();
  b.step(1);
  const auto started = std::chrono::steady_clock::now();
  std::thread([&] { b.close(); }).join();
  CHECK(std::chrono::steady_clock::now() - started < 8s);
  std::string message;
  CHECK(failure_code([&] { b.step(1); }, &message) == 1);
  CHECK(message.find("closed") != std::string::npos);
  const auto a_started = std::chrono::steady_clock::now();
  std::thread([&] { a.close(); }).join();
  CHECK(std::chrono::steady_clock::now() - a_started < 8s);
}
