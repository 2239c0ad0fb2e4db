// The Trainer: checkpoints' state taken and restored, a run through every epoch, and a learner's failure
// stopping the run with its error.

#include "learner/trainer.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tests/config/temp_dir.hpp"
#include "tests/learner/learner_fixtures.hpp"

namespace {

using gridtrain::config::testing::TempDir;
using gridtrain::learner::EpochReport;
using gridtrain::learner::Trainer;
using gridtrain::learner::TrainerSetup;
using namespace gridtrain::learner::testing;

}  // namespace

TEST_CASE("a checkpoint's state restored into a fresh learner continues the same run") {
  auto a = must_create(mlp_config(), blobs(200));
  for (int i = 0; i < 17; ++i) must_step(*a);
  auto saved = Trainer::checkpoint_data(*a);
  REQUIRE(saved.ok());
  CHECK(saved.value().step == 17);
  CHECK_FALSE(saved.value().optimizer_state.empty());  // momentum: the velocity is saved too
  auto b = must_create(mlp_config(), blobs(200));
  REQUIRE(Trainer::restore(*b, saved.value()).ok());
  CHECK(b->steps() == 17);
  CHECK(arena(*b) == arena(*a));
  must_step(*a);
  must_step(*b);
  CHECK(arena(*b) == arena(*a));
}

TEST_CASE("a checkpoint holds the outer step's state where the rounds made some, and restore gives it back") {
  auto a = must_create(mlp_config(), blobs(200));
  for (int i = 0; i < 3; ++i) must_step(*a);
  auto plain = Trainer::checkpoint_data(*a);
  REQUIRE(plain.ok());
  CHECK(plain.value().outer_state.empty());  // no outer step yet: none
  // An outer step over the whole model, as a round of allreduce.outer nesterov makes it (the store's part).
  auto& store = a->params();
  store.outer_range(0, store.size(), [](std::size_t, std::span<float>, std::span<float> o, std::span<float> v) {
    for (std::size_t k = 0; k < o.size(); ++k) {
      o[k] += 0.5f;
      v[k] = 0.25f;
    }
  });
  auto saved = Trainer::checkpoint_data(*a);
  REQUIRE(saved.ok());
  const std::size_t n = store.size();
  REQUIRE(saved.value().outer_state.size() == 2 * n);
  CHECK(saved.value().outer_state[0] == saved.value().params[0] + 0.5f);
  CHECK(saved.value().outer_state[n] == 0.25f);
  auto b = must_create(mlp_config(), blobs(200));
  REQUIRE(Trainer::restore(*b, saved.value()).ok());
  std::vector<float> outer(n), velocity(n);
  b->params().outer_state(outer, velocity);
  CHECK(outer == std::vector<float>(saved.value().outer_state.begin(), saved.value().outer_state.begin() + n));
  CHECK(velocity == std::vector<float>(n, 0.25f));
}

TEST_CASE("a trainer runs every epoch, reports each, and ends done with an ok status") {
  auto config = mlp_config();
  config.epochs = 3;
  TrainerSetup setup;
  setup.learner = must_create(config, blobs(96));
  setup.test = blobs(60, 8, 3, 7);
  std::vector<EpochReport> reports;
  setup.on_epoch = [&](const EpochReport& r) { reports.push_back(r); };
  Trainer trainer(std::move(setup));
  trainer.start();
  trainer.join();
  REQUIRE(trainer.done());
  CHECK(trainer.status().ok());
  REQUIRE(reports.size() == 3);
  CHECK(reports.back().epoch == 3);
  CHECK(reports.back().samples == 3 * 96);
  CHECK(trainer.final_accuracy() == reports.back().test_accuracy);
  CHECK(trainer.final_accuracy() > 0.9);
}

// Through the real interface: a test set that does not fit the model makes the learner's first evaluation
// fail, as a failing device makes a step fail.
TEST_CASE("a trainer whose learner fails stops there, done, with the learner's error as its status") {
  TempDir dir;
  auto config = mlp_config();
  config.epochs = 3;
  TrainerSetup setup;
  setup.learner = must_create(config, blobs(96));
  setup.test = blobs(60, 9);  // 9 floats a sample; the model takes 8
  const auto learner = setup.learner;
  int reported = 0;
  setup.on_epoch = [&](const EpochReport&) { ++reported; };
  setup.checkpoint_path = (dir.path() / "node.ckpt").string();
  setup.checkpoint_every = 1000;  // none during the run: only the final one, which a failed run does not write
  Trainer trainer(std::move(setup));
  trainer.start();
  trainer.join();
  REQUIRE(trainer.done());
  REQUIRE_FALSE(trainer.status().ok());
  CHECK(trainer.status().error().key == "learner.model");
  CHECK(trainer.status().error().message.find("9 floats") != std::string::npos);
  CHECK(learner->epoch() == 1);  // it stopped at the first evaluation, at the end of the first epoch
  CHECK(reported == 0);
  CHECK_FALSE(std::filesystem::exists(dir.path() / "node.ckpt"));
}

// The pacing by CPU share (allreduce.cpu_share), through a whole run: the averaging's CPU time is a counter here that
// each allowed round raises by `round_cost`, and the round completes at once.
TEST_CASE("a trainer paced by CPU share allows rounds while averaging stays within its share, and never past it") {
  auto allowed_in_run = [](double share, int every_steps, std::chrono::nanoseconds round_cost) {
    auto config = mlp_config();
    config.epochs = 2;
    TrainerSetup setup;
    setup.learner = must_create(config, blobs(96));  // 2 epochs of 96 samples in batches of 16: 12 steps
    setup.test = blobs(60, 8, 3, 7);
    setup.every_steps = every_steps;
    setup.cpu_share = share;
    auto averaging = std::make_shared<std::chrono::nanoseconds>(0);
    setup.averaging_cpu = [averaging] { return *averaging; };
    auto allowed = std::make_shared<std::uint64_t>(0);
    setup.rounds = [allowed] { return *allowed; };  // each round allowed completes at once
    setup.on_every_steps = [averaging, allowed, round_cost] {
      ++*allowed;
      *averaging += round_cost;
    };
    Trainer trainer(std::move(setup));
    trainer.start();
    trainer.join();
    REQUIRE(trainer.status().ok());
    return *allowed;
  };
  CHECK(allowed_in_run(0.05, 0, std::chrono::nanoseconds(1)) == 12);  // rounds that cost 1 ns: one after every step
  // A round that costs an hour of CPU: the first is allowed, and none after it in a run of milliseconds.
  CHECK(allowed_in_run(0.05, 0, std::chrono::hours(1)) == 1);
  CHECK(allowed_in_run(1.0, 0, std::chrono::nanoseconds(0)) == 0);   // share 1: back to back, nothing to allow
  CHECK(allowed_in_run(0.05, 4, std::chrono::hours(1)) == 3);        // every_steps wins over the share
}

// allreduce.staleness_bound through a whole run: here a round completes as soon as the trainer allows one, so each
// wait is short; what counts is where the trainer waits, and that it allows a round before it does.
TEST_CASE("a trainer with a staleness bound allows a round and waits for it every bound steps, and not when alone") {
  auto run = [](int bound, bool peers) {
    auto config = mlp_config();
    config.epochs = 2;
    TrainerSetup setup;
    setup.learner = must_create(config, blobs(96));  // 12 steps
    setup.test = blobs(60, 8, 3, 7);
    setup.cpu_share = 1;  // not paced: rounds back to back, and no allowance but the bound's
    auto rounds = std::make_shared<std::uint64_t>(0);
    auto allowed = std::make_shared<int>(0);
    setup.rounds = [rounds] { return *rounds; };
    setup.averaging = [peers] { return peers; };
    setup.on_every_steps = [rounds, allowed] {
      ++*allowed;
      ++*rounds;
    };
    setup.staleness_bound = bound;
    std::vector<EpochReport> reports;
    setup.on_epoch = [&](const EpochReport& r) { reports.push_back(r); };
    Trainer trainer(std::move(setup));
    trainer.start();
    trainer.join();
    REQUIRE(trainer.status().ok());
    REQUIRE(reports.size() == 2);
    return std::pair{*allowed, reports[0].waited_s + reports[1].waited_s};
  };
  // The first step sees the count; steps 4, 7 and 10 are 3 past the last round, and wait for one.
  const auto [allowed, waited_s] = run(3, true);
  CHECK(allowed == 3);
  CHECK(waited_s > 0);
  CHECK(run(3, false) == std::pair{0, 0.0});  // a node without a line with a peer never waits
  CHECK(run(0, true) == std::pair{0, 0.0});   // the default never waits
}

// The node waits for allowances exactly when the trainer gives them (app/run_command.cpp asks the same question).
TEST_CASE("a trainer paces rounds by every_steps, or by a CPU share below 1 only with a clock to pace by") {
  CHECK(gridtrain::learner::paces_rounds(4, 1.0, false));
  CHECK(gridtrain::learner::paces_rounds(0, 0.025, true));
  // No averaging clock: rounds back to back, never a wait for allowances that do not come.
  CHECK_FALSE(gridtrain::learner::paces_rounds(0, 0.025, false));
  CHECK_FALSE(gridtrain::learner::paces_rounds(0, 1.0, true));
}
