// The Learner: minibatch order and progress, evaluation, construction errors, the locking contract with a
// concurrent allreduce, and learning a small problem end to end.

#include "learner/learner.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <thread>

#include "learner/gemm.hpp"

namespace {

using gridtrain::config::LayerType;
using gridtrain::config::LearnerConfig;
using gridtrain::learner::Dataset;
using gridtrain::learner::Learner;

// `count` points around `classes` centres 3 apart in `dims` dimensions (centre k at 3·e_k), noise std 0.5:
// separable with a wide margin.
Dataset blobs(std::size_t count, int dims = 8, int classes = 3, std::uint64_t seed = 5) {
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

LearnerConfig mlp_config(int batch = 16, int dims = 8, int classes = 3) {
  LearnerConfig c = gridtrain::config::defaults().learner;
  c.device = gridtrain::config::Device::cpu;
  c.seed = 1;
  c.batch = batch;
  c.epochs = 10;
  c.threads = 0;
  c.model.input = {dims};
  c.model.layers = {{.type = LayerType::dense, .units = 32},
                    {.type = LayerType::relu},
                    {.type = LayerType::dense, .units = classes},
                    {.type = LayerType::softmax_cross_entropy}};
  c.optimizer.kind = gridtrain::config::OptimizerKind::momentum;
  c.optimizer.learning_rate = 0.05;
  c.optimizer.momentum = 0.9;
  c.optimizer.weight_decay = 1e-4;
  c.optimizer.schedule = gridtrain::config::Schedule::constant;
  return c;
}

std::unique_ptr<Learner> must_create(const LearnerConfig& c, Dataset d) {
  auto r = Learner::create(c, std::move(d));
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  return std::move(r).value();
}

std::vector<float> arena(const Learner& l) {
  std::vector<float> out(l.params().size());
  l.params().fetch(out);
  return out;
}

}  // namespace

TEST_CASE("an MLP learns a separable 3-class problem to over 95% train accuracy in a few hundred steps") {
  auto learner = must_create(mlp_config(), blobs(600));
  const auto before = learner->evaluate(learner->train_set());
  double first_loss = 0, last_loss = 0;
  for (int s = 0; s < 300; ++s) {
    const auto r = learner->step();
    if (s == 0) first_loss = r.loss;
    last_loss = r.loss;
  }
  const auto after = learner->evaluate(learner->train_set());
  CHECK(after.count == 600);
  CHECK(after.accuracy > 0.95);
  CHECK(after.loss < before.loss / 4);
  CHECK(last_loss < first_loss);
  const auto held_out = learner->evaluate(blobs(300, 8, 3, 99));
  CHECK(held_out.accuracy > 0.95);
}

TEST_CASE("an epoch visits every sample once, in minibatches of the configured size and one smaller last") {
  auto learner = must_create(mlp_config(4), blobs(10));
  CHECK(learner->steps_per_epoch() == 3);
  auto order = learner->epoch_order();
  std::vector<std::uint32_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::uint32_t> all(10);
  std::iota(all.begin(), all.end(), 0u);
  CHECK(sorted == all);
  CHECK(order != all);  // shuffled
  CHECK(learner->step().batch == 4);
  CHECK(learner->step().batch == 4);
  CHECK(learner->epoch() == 0);
  CHECK(learner->step().batch == 2);
  CHECK(learner->epoch() == 1);
  CHECK(learner->samples() == 10);
  CHECK(learner->steps() == 3);
  CHECK(learner->epoch_order() != order);  // a new shuffle per epoch
  CHECK_FALSE(learner->done());
}

TEST_CASE("the minibatch order depends only on the seed and the epoch") {
  auto a = must_create(mlp_config(4), blobs(10));
  auto b = must_create(mlp_config(4), blobs(10));
  auto other = mlp_config(4);
  other.seed = 2;
  auto c = must_create(other, blobs(10));
  CHECK(a->epoch_order() == b->epoch_order());
  CHECK(a->epoch_order() != c->epoch_order());
}

TEST_CASE("two learners with one config and one shard train to bit-identical models") {
  auto a = must_create(mlp_config(), blobs(100));
  auto b = must_create(mlp_config(), blobs(100));
  for (int s = 0; s < 20; ++s) {
    a->step();
    b->step();
  }
  CHECK(arena(*a) == arena(*b));
}

TEST_CASE("restoring the step count, the parameters and the velocity resumes training exactly") {
  auto a = must_create(mlp_config(4), blobs(10));
  for (int s = 0; s < 7; ++s) a->step();
  auto b = must_create(mlp_config(4), blobs(10));
  b->restore_progress(7);
  CHECK(b->epoch() == 2);
  CHECK(b->samples() == 24);
  CHECK(b->steps() == 7);
  CHECK(b->epoch_order() == a->epoch_order());
  b->params().assign(arena(*a));
  std::copy(a->optimizer().state().begin(), a->optimizer().state().end(), b->optimizer().state().begin());
  for (int s = 0; s < 4; ++s) CHECK(a->step().loss == b->step().loss);
  CHECK(arena(*a) == arena(*b));
}

TEST_CASE("evaluation does not depend on the minibatch size it is cut into") {
  const Dataset data = blobs(23);
  auto a = must_create(mlp_config(4), blobs(10));
  auto b = must_create(mlp_config(7), blobs(10));
  const auto ea = a->evaluate(data), eb = b->evaluate(data);
  CHECK(ea.count == 23);
  CHECK(ea.loss == doctest::Approx(eb.loss).epsilon(1e-6));
  CHECK(ea.accuracy == eb.accuracy);
  CHECK(ea.loss > 0);
}

TEST_CASE("a step reports the learning rate of its schedule") {
  auto c = mlp_config(5);
  c.optimizer.schedule = gridtrain::config::Schedule::step;
  c.optimizer.step_every_epochs = 1;
  c.optimizer.step_gamma = 0.5;
  auto learner = must_create(c, blobs(10));
  CHECK(learner->step().learning_rate == doctest::Approx(0.05));
  CHECK(learner->step().learning_rate == doctest::Approx(0.05));
  CHECK(learner->step().learning_rate == doctest::Approx(0.025));  // epoch 1
}

TEST_CASE("a shard that does not fit the model is refused with an error") {
  SUBCASE("samples of another size") {
    auto r = Learner::create(mlp_config(4, 8), blobs(10, 9));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("8 floats") != std::string::npos);
    CHECK(r.error().message.find("9 floats") != std::string::npos);
  }
  SUBCASE("more classes than the model scores") {
    auto r = Learner::create(mlp_config(4, 8, 2), blobs(10, 8, 3));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("classes") != std::string::npos);
  }
  SUBCASE("a label out of range") {
    Dataset d = blobs(10);
    d.labels[4] = 3;
    auto r = Learner::create(mlp_config(4), d);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("sample 4") != std::string::npos);
  }
  SUBCASE("an empty shard") { CHECK_FALSE(Learner::create(mlp_config(4), blobs(0)).ok()); }
  SUBCASE("a model whose shapes do not fit") {
    auto c = mlp_config(4);
    c.model.layers[0].units = 0;
    auto r = Learner::create(c, blobs(10));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().key == "learner.model.layers[0]");
  }
  // device: cuda without a GPU is refused in cuda_backend_test.cpp, which knows whether this machine has one.
}

TEST_CASE("learner.threads sets OpenBLAS's thread count") {
  const int before = gridtrain::learner::blas_threads();
  auto c = mlp_config();
  c.threads = 1;
  must_create(c, blobs(10));
  CHECK(gridtrain::learner::blas_threads() == 1);
  gridtrain::learner::set_blas_threads(before);
}

// The locking contract: a thread that takes each tensor's lock, poisons the tensor with NaN, and puts it back
// before letting go must change nothing. A learner that read a tensor without its lock would see NaN; one that
// wrote without it would lose the write to the restore. Either way its model would differ from a run alone.
TEST_CASE("a fetch and a poison-and-restore of every tensor under its lock, beside step(), change nothing") {
  // Wider than the other tests' MLP, so each step spends long enough on each tensor to meet the other thread.
  auto config = mlp_config(32, 64);
  config.model.layers[0].units = 256;
  auto alone = must_create(config, blobs(320, 64));
  auto beside = must_create(config, blobs(320, 64));
  std::atomic<bool> stop{false};
  std::atomic<int> rounds{0}, nan_fetched{0};
  std::thread allreduce([&] {
    auto& store = beside->params();
    std::vector<float> sent(store.size()), saved;
    while (!stop.load() || rounds.load() < 20) {
      store.fetch(sent);  // each tensor whole: never a poisoned one
      nan_fetched += static_cast<int>(std::count_if(sent.begin(), sent.end(), [](float v) { return std::isnan(v); }));
      store.update_each([&](std::size_t, std::span<float> t) {
        saved.assign(t.begin(), t.end());
        std::fill(t.begin(), t.end(), std::nanf(""));
        // Hold the poison a while: a learner that skipped the lock would meet it (not a timing assertion).
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        std::copy(saved.begin(), saved.end(), t.begin());
      });
      ++rounds;
    }
  });
  // Step until the other thread has done its rounds too, however the two are scheduled.
  bool finite = true;
  int steps = 0;
  for (; steps < 100 || rounds.load() < 20; ++steps) finite = finite && std::isfinite(beside->step().loss);
  stop = true;
  allreduce.join();
  for (int s = 0; s < steps; ++s) alone->step();
  CHECK(finite);
  CHECK(nan_fetched.load() == 0);
  CHECK(arena(*alone) == arena(*beside));
}

// With a real elastic update beside it (m <- (1 - α)·m + α·centre, once per learner step), training goes on and
// no step is lost: the update lands on whatever the tensor holds. Under TSan, this is the data-race check of the
// contract.
TEST_CASE("elastic updates beside step() keep the model whole and training") {
  auto learner = must_create(mlp_config(), blobs(300));
  const std::vector<float> centre = arena(*learner);
  std::atomic<bool> stop{false};
  std::atomic<int> updates{0};
  std::thread allreduce([&] {
    auto& store = learner->params();
    std::vector<float> fetched(store.size());
    std::uint64_t seen = 0;
    while (!stop.load()) {
      if (learner->steps() == seen) {
        std::this_thread::yield();
        continue;
      }
      seen = learner->steps();
      store.fetch(fetched);
      store.update_each([&](std::size_t offset, std::span<float> t) {
        for (std::size_t i = 0; i < t.size(); ++i) t[i] = 0.98f * t[i] + 0.02f * centre[offset + i];
      });
      ++updates;
    }
  });
  for (int s = 0; s < 150 || updates.load() < 20; ++s) learner->step();
  stop = true;
  allreduce.join();
  const auto params = arena(*learner);
  CHECK(std::all_of(params.begin(), params.end(), [](float v) { return std::isfinite(v); }));
  CHECK(learner->evaluate(learner->train_set()).accuracy > 0.9);
}
