#include "learner/parameter_store.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/base/run_in_child.hpp"

using gridtrain::learner::ParameterStore;
using gridtrain::learner::TensorSpec;
using gridtrain::learner::UpdateMode;
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

TEST_CASE("deferred: updates collect apart, readers see them, and the owner's apply adds them to the model") {
  ParameterStore store(mlp_specs(), UpdateMode::deferred);  // tensors at [0, 12), [12, 16), [16, 24), [24, 26)
  auto model = store.owner_arena();
  for (std::size_t i = 0; i < model.size(); ++i) model[i] = static_cast<float>(i);
  CHECK(store.apply_deferred() == 0);  // nothing pending yet
  CHECK(store.deferred_apply_time() == std::chrono::nanoseconds(0));  // and no time counted for it
  // A round's pull for [10, 20): the tensors' parts, in reverse order, into the pending buffer, not the model.
  std::vector<std::pair<std::size_t, std::size_t>> parts;
  store.defer_range(10, 20, [&](std::size_t offset, std::span<float> pending) {
    parts.emplace_back(offset, pending.size());
    for (auto& x : pending) x += 0.5f;
  });
  CHECK(parts == std::vector<std::pair<std::size_t, std::size_t>>{{16, 4}, {12, 4}, {10, 2}});
  CHECK(model[10] == 10.0f);  // the model is the owner's until it applies
  std::vector<float> seen(store.size());
  store.fetch(seen);  // a round's snapshot, a warm start's answer: the model as it will be
  for (std::size_t i = 0; i < seen.size(); ++i) {
    CAPTURE(i);
    CHECK(seen[i] == static_cast<float>(i) + (i >= 10 && i < 20 ? 0.5f : 0.0f));
  }
  std::vector<float> part(3);
  store.fetch_range(18, part);
  CHECK(part == std::vector<float>{18.5f, 19.5f, 20.0f});
  // The owner moved element 11 meanwhile: its move is kept, and the pull is added on top.
  model[11] = 100.0f;
  CHECK(store.apply_deferred() == 12 + 4 + 8);  // the three tensors that had some pending
  const auto applying = store.deferred_apply_time();
  CHECK(applying > std::chrono::nanoseconds(0));  // averaging's cost on the owner's thread, for the pacer
  CHECK(model[9] == 9.0f);
  CHECK(model[10] == 10.5f);
  CHECK(model[11] == 100.5f);
  CHECK(model[19] == 19.5f);
  CHECK(model[20] == 20.0f);
  CHECK(store.apply_deferred() == 0);  // applied once
  CHECK(store.deferred_apply_time() == applying);
  store.fetch(seen);
  CHECK(seen[10] == 10.5f);
}

TEST_CASE("deferred: assign makes the model the values given at the owner's next apply, keeping its later moves") {
  ParameterStore store(mlp_specs(), UpdateMode::deferred);
  auto model = store.owner_arena();
  std::fill(model.begin(), model.end(), 1.0f);
  std::vector<float> warm(store.size(), 7.0f);
  store.assign(warm);  // a warm start while the owner trains
  CHECK(model[0] == 1.0f);
  model[3] = 2.0f;  // the owner's step, after the assign
  store.apply_deferred();
  CHECK(model[0] == 7.0f);
  CHECK(model[3] == 8.0f);
  CHECK(model[25] == 7.0f);
}

TEST_CASE("deferred, host mirror: take_deferred hands the pending updates over by range and keeps the mirror true") {
  ParameterStore store(mlp_specs(), UpdateMode::deferred);
  std::vector<float> gpu(store.size());  // the owner's model, elsewhere
  for (std::size_t i = 0; i < gpu.size(); ++i) gpu[i] = static_cast<float>(i);
  store.update_mirror(gpu);
  std::vector<float> out(store.size(), -1.0f);
  CHECK(store.take_deferred(out).empty());
  // Pulls into tensors 1 and 2 (adjacent: one range) and 3 ... and not 0.
  store.defer_range(12, 26, [](std::size_t, std::span<float> pending) {
    for (auto& x : pending) x += 2.0f;
  });
  const auto taken = store.take_deferred(out);
  CHECK(taken == std::vector<ParameterStore::Range>{{12, 14}});
  CHECK(out[0] == -1.0f);  // a tensor without pending updates is not written
  CHECK(out[12] == 2.0f);
  CHECK(out[25] == 2.0f);
  for (const auto& r : taken)
    for (std::size_t i = r.offset; i < r.offset + r.size; ++i) gpu[i] += out[i];
  std::vector<float> mirror(store.size());
  store.fetch(mirror);
  CHECK(mirror == gpu);  // the mirror has the pull too, and nothing is pending any more
  CHECK(store.take_deferred(out).empty());
  // Two tensors apart: two ranges, in arena order.
  store.defer_range(0, 1, [](std::size_t, std::span<float> p) { p[0] = 1.0f; });
  store.defer_range(24, 25, [](std::size_t, std::span<float> p) { p[0] = 1.0f; });
  CHECK(store.take_deferred(out) == std::vector<ParameterStore::Range>{{0, 12}, {24, 2}});
  // A refresh from the owner keeps what is pending.
  store.defer_range(12, 13, [](std::size_t, std::span<float> p) { p[0] = 3.0f; });
  std::vector<float> later(store.size(), 50.0f);
  store.update_mirror(later);
  store.fetch(mirror);
  CHECK(mirror[12] == 53.0f);
  CHECK(mirror[13] == 50.0f);
}

TEST_CASE("deferred: an owner that writes without our locks never loses a pull that lands meanwhile") {
  // The owner (PyTorch's optimizer) rewrites the model without locks and applies what is pending after each "step";
  // the data plane adds 1 to every float 1000 times. Whatever the interleaving, every pull lands exactly once.
  ParameterStore store({{"a", {512}}, {"b", {1024}}}, UpdateMode::deferred);
  auto model = store.owner_arena();
  std::atomic<bool> done{false};
  std::thread owner([&] {
    while (!done.load()) {
      for (auto& x : model) x += 0.0f;  // the optimizer's write of every float (a no-op value, a real write)
      store.apply_deferred();
    }
    store.apply_deferred();
  });
  for (int round = 0; round < 1000; ++round)
    store.defer_range(0, store.size(), [](std::size_t, std::span<float> pending) {
      for (auto& x : pending) x += 1.0f;
    });
  done = true;
  owner.join();
  for (float x : model) REQUIRE(x == 1000.0f);
}

TEST_CASE("a store's mode is a precondition of its update calls") {
  const auto in_place = run_in_child([] {
    ParameterStore store(mlp_specs());
    store.defer_range(0, 1, [](std::size_t, std::span<float>) {});
  });
  CHECK(in_place.aborted);
  CHECK(in_place.stderr_text ==
        "gridtrain: precondition violated: ParameterStore::defer_range on a store whose updates are in place\n");
  const auto deferred = run_in_child([] {
    ParameterStore store(mlp_specs(), UpdateMode::deferred);
    store.update_range(0, 1, [](std::size_t, std::span<float>) {});
  });
  CHECK(deferred.aborted);
}

TEST_CASE("outer state: made at a tensor's first outer step from the model, kept, copied out and restored") {
  for (UpdateMode mode : {UpdateMode::in_place, UpdateMode::deferred}) {
    CAPTURE(static_cast<int>(mode));
    ParameterStore store(mlp_specs(), mode);
    const std::size_t n = store.size();
    std::vector<float> model(n);
    for (std::size_t k = 0; k < n; ++k) model[k] = static_cast<float>(k);
    if (mode == UpdateMode::in_place) {
      store.assign(model);
    } else {
      store.assign(model);
      store.apply_deferred();
    }
    CHECK_FALSE(store.has_outer());
    std::vector<float> outer(n), velocity(n);
    store.outer_state(outer, velocity);  // none yet: the model, and no momentum
    CHECK(outer == model);
    CHECK(velocity == std::vector<float>(n, 0.0f));

    // An outer step over b1 and w2 (floats 12..23): each sees its tensor's state made from the model, writes the
    // model (in place) or the pending buffer (deferred), and keeps o and v.
    store.outer_range(12, 24, [&](std::size_t offset, std::span<float> target, std::span<float> o,
                                  std::span<float> v) {
      for (std::size_t k = 0; k < target.size(); ++k) {
        CHECK(o[k] == static_cast<float>(offset + k));
        CHECK(v[k] == 0.0f);
        o[k] += 100.0f;
        v[k] = 1.0f;
        target[k] += 100.0f;  // o' - s, nothing having moved the model
      }
    });
    CHECK(store.has_outer());
    if (mode == UpdateMode::deferred) store.apply_deferred();
    std::vector<float> now(n);
    store.fetch(now);
    store.outer_state(outer, velocity);
    for (std::size_t k = 0; k < n; ++k) {
      CAPTURE(k);
      const bool stepped = k >= 12 && k < 24;
      CHECK(now[k] == model[k] + (stepped ? 100.0f : 0.0f));
      CHECK(outer[k] == now[k]);
      CHECK(velocity[k] == (stepped ? 1.0f : 0.0f));
    }

    // A checkpoint's state restored into a fresh store; and assign (a warm start) forgets it.
    ParameterStore restored(mlp_specs(), mode);
    restored.assign(now);
    if (mode == UpdateMode::deferred) restored.apply_deferred();
    restored.set_outer_state(outer, velocity);
    std::vector<float> outer2(n), velocity2(n);
    restored.outer_state(outer2, velocity2);
    CHECK(outer2 == outer);
    CHECK(velocity2 == velocity);
    restored.assign(model);
    restored.outer_state(outer2, velocity2);
    CHECK(outer2 == model);  // made again from the model it was given (deferred: with it pending)
    CHECK(velocity2 == std::vector<float>(n, 0.0f));
  }
}
