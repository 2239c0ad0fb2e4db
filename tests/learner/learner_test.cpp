// The Learner: minibatch order and progress, evaluation, construction errors, the locking contract with a
// concurrent allreduce, and learning a small problem end to end.

#include "learner/learner.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <numeric>
#include <thread>

#include "learner/gemm.hpp"
#include "tests/learner/learner_fixtures.hpp"

namespace {

using gridtrain::learner::Dataset;
using gridtrain::learner::Learner;
using namespace gridtrain::learner::testing;

}  // namespace

TEST_CASE("an MLP learns a separable 3-class problem to over 95% train accuracy in a few hundred steps") {
  auto learner = must_create(mlp_config(), blobs(600));
  const auto before = must_evaluate(*learner, learner->train_set());
  double first_loss = 0, last_loss = 0;
  for (int s = 0; s < 300; ++s) {
    const auto r = must_step(*learner);
    if (s == 0) first_loss = r.loss;
    last_loss = r.loss;
  }
  const auto after = must_evaluate(*learner, learner->train_set());
  CHECK(after.count == 600);
  CHECK(after.accuracy > 0.95);
  CHECK(after.loss < before.loss / 4);
  CHECK(last_loss < first_loss);
  const auto held_out = must_evaluate(*learner, blobs(300, 8, 3, 99));
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
  CHECK(must_step(*learner).batch == 4);
  CHECK(must_step(*learner).batch == 4);
  CHECK(learner->epoch() == 0);
  CHECK(must_step(*learner).batch == 2);
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
    must_step(*a);
    must_step(*b);
  }
  CHECK(arena(*a) == arena(*b));
}

TEST_CASE("minibatches gathered by the backend from the held shard train exactly as the learner's own gather") {
  // learner.device cpu with data_on_device true (which the config refuses, as it buys the CPU nothing) runs the
  // device path on the CPU backend: the backend holds the shard and each epoch's order and gathers every
  // minibatch, the smaller last one and an epoch's change of order included (10 samples in batches of 4).
  auto held_config = mlp_config(4);
  held_config.device = gridtrain::config::Device::cpu;
  held_config.data_on_device = gridtrain::config::DataOnDevice::yes;
  auto host = must_create(mlp_config(4), blobs(10));
  auto held = must_create(held_config, blobs(10));
  CHECK_FALSE(host->data_on_device());
  REQUIRE(held->data_on_device());
  for (int s = 0; s < 9; ++s) {
    CAPTURE(s);
    const auto want = must_step(*host), got = must_step(*held);
    CHECK(got.loss == want.loss);
    CHECK(got.batch == want.batch);
  }
  CHECK(arena(*held) == arena(*host));
  // And after a restore, which starts its epoch's order over in the middle.
  auto resumed = must_create(held_config, blobs(10));
  REQUIRE(resumed->restore_progress(9).ok());
  resumed->params().assign(arena(*host));
  const auto state = must_optimizer_state(*host);
  std::copy(state.begin(), state.end(), must_optimizer_state(*resumed).begin());
  for (int s = 0; s < 4; ++s) CHECK(must_step(*resumed).loss == must_step(*host).loss);
  CHECK(arena(*resumed) == arena(*host));
}

TEST_CASE("learner.data_on_device true where auto found no GPU is refused, naming the key; auto stays on the host") {
  auto c = mlp_config(4);
  c.device = gridtrain::config::Device::automatic;
  c.data_on_device = gridtrain::config::DataOnDevice::yes;
  auto r = Learner::create(c, blobs(10));
  if (r.ok() && r.value()->backend_name() == "cuda") {
    CHECK(r.value()->data_on_device());
    return;
  }
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().key == "learner.data_on_device");
  CHECK(r.error().message.find("expected a GPU for true, found the CPU backend") != std::string::npos);
  c.data_on_device = gridtrain::config::DataOnDevice::automatic;
  auto automatic = must_create(c, blobs(10));
  CHECK_FALSE(automatic->data_on_device());
  CHECK(automatic->data_note() == "in host memory (the CPU backend computes there)");
}

TEST_CASE("steps that leave their loss unread sum it for take_loss_totals(), evaluations not counted") {
  auto read = must_create(mlp_config(4), blobs(10));
  auto unread = must_create(mlp_config(4), blobs(10));
  double loss = 0;
  std::uint64_t correct = 0, samples = 0;
  for (int s = 0; s < 5; ++s) {  // 10 samples in batches of 4: 4, 4, 2, then 4, 4
    const auto r = must_step(*read);
    loss += r.loss * r.batch;
    correct += static_cast<std::uint64_t>(std::lround(r.accuracy * r.batch));
    samples += static_cast<std::uint64_t>(r.batch);
    auto later = unread->step(Learner::LossRead::later);
    REQUIRE(later.ok());
    CHECK(std::isnan(later.value().loss));
    CHECK(later.value().batch == r.batch);
    if (s == 2) must_evaluate(*unread, unread->train_set());  // its losses go through the same Loss
  }
  CHECK(arena(*unread) == arena(*read));  // reading the loss or not changes no arithmetic
  auto totals = unread->take_loss_totals();
  REQUIRE(totals.ok());
  CHECK(totals.value().samples == samples);
  CHECK(totals.value().correct == correct);
  CHECK(totals.value().loss == doctest::Approx(loss).epsilon(1e-12));
  auto again = unread->take_loss_totals();  // taken: zero until the next steps
  REQUIRE(again.ok());
  CHECK(again.value().samples == 0);
}

TEST_CASE("restoring the step count, the parameters and the velocity resumes training exactly") {
  auto a = must_create(mlp_config(4), blobs(10));
  for (int s = 0; s < 7; ++s) must_step(*a);
  auto b = must_create(mlp_config(4), blobs(10));
  REQUIRE(b->restore_progress(7).ok());
  CHECK(b->epoch() == 2);
  CHECK(b->samples() == 24);
  CHECK(b->steps() == 7);
  CHECK(b->epoch_order() == a->epoch_order());
  b->params().assign(arena(*a));
  const auto state = must_optimizer_state(*a);
  std::copy(state.begin(), state.end(), must_optimizer_state(*b).begin());
  for (int s = 0; s < 4; ++s) CHECK(must_step(*a).loss == must_step(*b).loss);
  CHECK(arena(*a) == arena(*b));
}

TEST_CASE("evaluation does not depend on the minibatch size it is cut into") {
  const Dataset data = blobs(23);
  auto a = must_create(mlp_config(4), blobs(10));
  auto b = must_create(mlp_config(7), blobs(10));
  const auto ea = must_evaluate(*a, data), eb = must_evaluate(*b, data);
  CHECK(ea.count == 23);
  CHECK(ea.loss == doctest::Approx(eb.loss).epsilon(1e-6));
  CHECK(ea.accuracy == eb.accuracy);
  CHECK(ea.loss > 0);
}

TEST_CASE("evaluation of data that does not fit the model returns check()'s error, and the learner goes on") {
  auto learner = must_create(mlp_config(4), blobs(10));
  auto r = learner->evaluate(blobs(10, 9));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == learner->check(blobs(10, 9)).error().message);
  CHECK(learner->step().ok());
  CHECK(learner->evaluate(blobs(10)).ok());
}

TEST_CASE("a step reports the learning rate of its schedule") {
  auto c = mlp_config(5);
  c.optimizer.schedule = gridtrain::config::Schedule::step;
  c.optimizer.step_every_epochs = 1;
  c.optimizer.step_gamma = 0.5;
  auto learner = must_create(c, blobs(10));
  CHECK(must_step(*learner).learning_rate == doctest::Approx(0.05));
  CHECK(must_step(*learner).learning_rate == doctest::Approx(0.05));
  CHECK(must_step(*learner).learning_rate == doctest::Approx(0.025));  // epoch 1
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
  for (; steps < 100 || rounds.load() < 20; ++steps) {
    auto r = beside->step();  // not must_step: a failure must not leave the other thread running
    finite = finite && r.ok() && std::isfinite(r.value().loss);
  }
  stop = true;
  allreduce.join();
  for (int s = 0; s < steps; ++s) must_step(*alone);
  CHECK(finite);
  CHECK(nan_fetched.load() == 0);
  CHECK(arena(*alone) == arena(*beside));
}

// The body is the one every backend runs (learner_fixtures.hpp); the CUDA backend's run is in
// cuda_backend_test.cpp.
TEST_CASE("elastic updates beside step() keep the model whole and training") {
  auto learner = must_create(mlp_config(), blobs(300));
  check_elastic_updates_beside_steps(*learner, 150);
}

TEST_CASE("every elastic update beside step() lands once") {
  auto config = mlp_config();
  config.optimizer.kind = gridtrain::config::OptimizerKind::sgd;
  config.optimizer.learning_rate = 0;
  config.optimizer.weight_decay = 0;
  auto learner = must_create(config, blobs(300));
  auto reference = must_create(config, blobs(300));
  check_elastic_updates_land_once(*learner, *reference, blobs(100, 8, 3, 6));
}
