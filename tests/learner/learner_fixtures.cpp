#include "tests/learner/learner_fixtures.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <random>
#include <thread>
#include "tests/base/require_ok.hpp"

namespace gridtrain::learner::testing {

using config::LayerType;

Dataset blobs(std::size_t count, int dims, int classes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  Dataset d;
  d.count = count;
  d.sample_shape = {dims};
  d.sample_floats = static_cast<std::size_t>(dims);
  d.classes = classes;
  for (std::size_t i = 0; i < count; ++i) {
    const int label = static_cast<int>(rng() % classes);
    d.labels.push_back(label);
    for (int j = 0; j < dims; ++j) d.images.push_back((j == label ? 3.0f : 0.0f) + noise(rng));
  }
  return d;
}

Dataset images(std::size_t count, int side, int classes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.6f);
  Dataset d;
  d.count = count;
  d.sample_shape = {1, side, side};
  d.sample_floats = std::size_t(side) * side;
  d.classes = classes;
  for (std::size_t i = 0; i < count; ++i) {
    const int label = static_cast<int>(rng() % classes);
    d.labels.push_back(label);
    for (int r = 0; r < side; ++r)
      for (int c = 0; c < side; ++c) d.images.push_back((r * classes / side == label ? 0.5f : 0.0f) + noise(rng));
  }
  return d;
}

config::ModelConfig small_cnn(int side, int classes) {
  config::ModelConfig mc;
  mc.input = {1, side, side};
  mc.layers = {{.type = LayerType::conv2d, .filters = 8, .kernel = 5, .stride = 1, .padding = 2},
               {.type = LayerType::relu},
               {.type = LayerType::maxpool, .stride = 2, .size = 2},
               {.type = LayerType::conv2d, .filters = 16, .kernel = 3, .stride = 1, .padding = 1},
               {.type = LayerType::relu},
               {.type = LayerType::maxpool, .stride = 2, .size = 2},
               {.type = LayerType::flatten},
               {.type = LayerType::dense, .units = 32},
               {.type = LayerType::relu},
               {.type = LayerType::dense, .units = classes},
               {.type = LayerType::softmax_cross_entropy}};
  return mc;
}

config::LearnerConfig mlp_config(int batch, int dims, int classes) {
  config::LearnerConfig c = config::defaults().learner;
  c.device = config::Device::cpu;
  c.seed = 1;
  c.batch = batch;
  c.epochs = 10;
  c.threads = 0;
  c.model.input = {dims};
  c.model.layers = {{.type = LayerType::dense, .units = 32},
                    {.type = LayerType::relu},
                    {.type = LayerType::dense, .units = classes},
                    {.type = LayerType::softmax_cross_entropy}};
  c.optimizer.kind = config::OptimizerKind::momentum;
  c.optimizer.learning_rate = 0.05;
  c.optimizer.momentum = 0.9;
  c.optimizer.weight_decay = 1e-4;
  c.optimizer.schedule = config::Schedule::constant;
  return c;
}

std::unique_ptr<Learner> must_create(const config::LearnerConfig& config, Dataset data) {
  auto r = Learner::create(config, std::move(data));
  REQUIRE_OK(r);
  return std::move(r).value();
}

StepResult must_step(Learner& learner) {
  auto r = learner.step();
  REQUIRE_OK(r);
  return r.value();
}

Evaluation must_evaluate(Learner& learner, const Dataset& data) {
  auto r = learner.evaluate(data);
  REQUIRE_OK(r);
  return r.value();
}

std::span<float> must_optimizer_state(Learner& learner) {
  auto r = learner.optimizer_state();
  REQUIRE_OK(r);
  return r.value();
}

std::vector<float> arena(Learner& learner) {
  if (Status synced = learner.synchronize(); !synced.ok()) FAIL(synced.error().to_string());
  std::vector<float> out(learner.params().size());
  learner.params().fetch(out);
  return out;
}

namespace {

// Steps `learner` at least `min_steps` times and until `update` has run `min_updates` times, `update` running on a
// thread of its own once per learner step it sees (it may miss steps, never runs twice for one), as the allreduce
// would. Returns how many times it ran; the test fails if a step did.
int step_beside_updates(Learner& learner, int min_steps, int min_updates, const std::function<void()>& update) {
  std::atomic<bool> stop{false};
  std::atomic<int> updates{0};
  std::thread allreduce([&] {
    std::uint64_t seen = 0;
    while (!stop.load()) {
      if (learner.steps() == seen) {
        std::this_thread::yield();
        continue;
      }
      seen = learner.steps();
      update();
      ++updates;
    }
  });
  bool stepped = true;
  for (int s = 0; stepped && (s < min_steps || updates.load() < min_updates); ++s) stepped = learner.step().ok();
  stop = true;
  allreduce.join();
  REQUIRE(stepped);
  return updates.load();
}

}  // namespace

void check_elastic_updates_beside_steps(Learner& learner, int min_steps) {
  const StoreTransfers before = learner.store_transfers();
  auto& store = learner.params();
  std::vector<float> centre(store.size()), fetched(store.size());
  store.fetch(centre);
  // One update per learner step: more would pin the model to the trailing centre.
  const int updates = step_beside_updates(learner, min_steps, 20, [&] {
    store.fetch(fetched);
    store.update_each([&](std::size_t offset, std::span<float> t) {
      for (std::size_t i = 0; i < t.size(); ++i) t[i] = 0.7f * t[i] + 0.3f * centre[offset + i];
    });
    centre.swap(fetched);
  });
  MESSAGE(updates << " elastic updates beside " << learner.steps() << " steps");
  const auto params = arena(learner);
  CHECK(std::all_of(params.begin(), params.end(), [](float v) { return std::isfinite(v); }));
  CHECK(must_evaluate(learner, learner.train_set()).accuracy > 0.9);
  CHECK(learner.store_transfers().passes > before.passes);
  CHECK(learner.store_transfers().bytes > before.bytes);
}

void check_elastic_updates_land_once(Learner& learner, Learner& reference, const Dataset& test) {
  constexpr float delta = 1.0f / 1024;
  std::vector<float> expected = arena(learner);
  const int updates = step_beside_updates(learner, 100, 50, [&] {
    learner.params().update_each([&](std::size_t, std::span<float> t) {
      for (float& v : t) v += delta;
    });
    for (float& v : expected) v += delta;
  });
  CAPTURE(updates);
  const auto params = arena(learner);
  REQUIRE(params.size() == expected.size());
  float worst = 0;
  for (std::size_t i = 0; i < params.size(); ++i) worst = std::max(worst, std::abs(params[i] - expected[i]));
  CHECK(worst <= delta / 100);
  // The backend's own model, not only the store: it evaluates as a CPU learner given the store does.
  reference.params().assign(params);
  CHECK(must_evaluate(learner, test).loss == doctest::Approx(must_evaluate(reference, test).loss).epsilon(1e-4));
}

}  // namespace gridtrain::learner::testing
