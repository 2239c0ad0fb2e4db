#include "learner/parameter_store.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "tests/base/run_in_child.hpp"

using gridtrain::learner::ParameterStore;
using gridtrain::learner::TensorSpec;
using gridtrain::testing::run_in_child;

namespace {

std::vector<TensorSpec> mlp_specs() {
  return {{"w1", {4, 3}}, {"b1", {4}}, {"w2", {2, 4}}, {"b2", {2}}};
}

}  // namespace

TEST_CASE("tensors lie back to back in one arena, in declaration order") {
  ParameterStore store(mlp_specs());
  REQUIRE(store.tensor_count() == 4);
  CHECK(store.size() == 12 + 4 + 8 + 2);
  CHECK(store.tensor(0).offset == 0);
  CHECK(store.tensor(1).offset == 12);
  CHECK(store.tensor(2).offset == 16);
  CHECK(store.tensor(3).offset == 24);
  CHECK(store.tensor(3).size == 2);
}

TEST_CASE("the signature tells models apart by names and shapes, and is stable") {
  ParameterStore a(mlp_specs());
  ParameterStore b(mlp_specs());
  CHECK(a.signature() == b.signature());
  CHECK(a.signature() == 0xaab904d55491de14ull);  // stable across runs and machines: peers compare it

  auto transposed = mlp_specs();
  transposed[0].shape = {3, 4};
  CHECK(ParameterStore(transposed).signature() != a.signature());
  auto renamed = mlp_specs();
  renamed[1].name = "bias1";
  CHECK(ParameterStore(renamed).signature() != a.signature());
  auto fewer = mlp_specs();
  fewer.pop_back();
  CHECK(ParameterStore(fewer).signature() != a.signature());
}

TEST_CASE("a zero extent is a violated precondition: it aborts, naming the tensor") {
  const auto end = run_in_child([] { ParameterStore({{"w", {3, 0}}}); });
  CHECK(end.aborted);
  CHECK(end.stderr_text == "gridtrain: precondition violated: tensor 'w' has an extent < 1\n");
}

TEST_CASE("fetch and assign copy the whole arena tensor by tensor") {
  ParameterStore store(mlp_specs());
  std::vector<float> in(store.size());
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) * 0.5f;
  store.assign(in);
  CHECK(store.data(2)[0] == 8.0f);  // element 16
  std::vector<float> out(store.size(), -1.0f);
  store.fetch(out);
  CHECK(out == in);
}

TEST_CASE("fetch_range copies exactly the floats of its range, across tensor boundaries") {
  ParameterStore store(mlp_specs());  // tensors at 0 (12 floats), 12 (4), 16 (8), 24 (2)
  std::vector<float> in(store.size());
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  store.assign(in);
  for (const auto& [begin, length] : std::vector<std::pair<std::size_t, std::size_t>>{
           {0, 26}, {10, 8}, {12, 4}, {13, 2}, {25, 1}, {5, 0}}) {
    CAPTURE(begin);
    CAPTURE(length);
    std::vector<float> out(length + 2, -1.0f);
    store.fetch_range(begin, std::span<float>(out).subspan(1, length));
    CHECK(out.front() == -1.0f);  // nothing written outside the span
    CHECK(out.back() == -1.0f);
    for (std::size_t k = 0; k < length; ++k) CHECK(out[1 + k] == static_cast<float>(begin + k));
  }
}

TEST_CASE("update_each visits tensors in reverse order with their absolute offsets") {
  ParameterStore store(mlp_specs());
  std::vector<std::size_t> offsets;
  store.update_each([&](std::size_t offset, std::span<float> t) {
    offsets.push_back(offset);
    for (auto& x : t) x = static_cast<float>(offset);
  });
  CHECK(offsets == std::vector<std::size_t>{24, 16, 12, 0});
  CHECK(store.data(1)[3] == 12.0f);
}

TEST_CASE("update_range visits the parts of the tensors inside the range, in reverse order") {
  ParameterStore store(mlp_specs());  // tensors at [0, 12), [12, 16), [16, 24), [24, ...)
  std::vector<std::pair<std::size_t, std::size_t>> parts;
  auto record = [&](std::size_t offset, std::span<float> t) {
    parts.emplace_back(offset, t.size());
    for (auto& x : t) x = -1.0f;
  };
  store.update_range(10, 20, record);
  CHECK(parts == std::vector<std::pair<std::size_t, std::size_t>>{{16, 4}, {12, 4}, {10, 2}});
  CHECK(store.data(0)[9] != -1.0f);
  CHECK(store.data(0)[10] == -1.0f);
  CHECK(store.data(2)[3] == -1.0f);
  CHECK(store.data(2)[4] != -1.0f);
  parts.clear();
  store.update_range(12, 16, record);  // exactly one tensor
  CHECK(parts == std::vector<std::pair<std::size_t, std::size_t>>{{12, 4}});
  parts.clear();
  store.update_range(5, 5, record);
  CHECK(parts.empty());
}

TEST_CASE("a fetch racing the learner never sees a half-written tensor") {
  // The learner rewrites each tensor with one value under its lock; a fetch must see every tensor whole.
  ParameterStore store({{"a", {512}}, {"b", {1024}}, {"c", {256}}});
  std::atomic<bool> stop{false};
  std::thread learner([&] {
    for (float v = 1; !stop.load(); v += 1) {
      for (std::size_t i = 0; i < store.tensor_count(); ++i) {
        std::lock_guard<std::mutex> hold(store.mutex(i));
        for (auto& x : store.data(i)) x = v;
      }
    }
  });
  std::vector<float> snapshot(store.size());
  int torn = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    store.fetch(snapshot);
    for (std::size_t i = 0; i < store.tensor_count(); ++i) {
      const auto& t = store.tensor(i);
      for (std::size_t k = 1; k < t.size; ++k)
        if (snapshot[t.offset + k] != snapshot[t.offset]) {
          ++torn;
          break;
        }
    }
  }
  stop = true;
  learner.join();
  CHECK(torn == 0);
}
