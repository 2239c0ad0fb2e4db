// The update rules and the learning-rate schedules, on cases small enough to compute by hand.

#include "learner/optimizer.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include "config/config.hpp"

namespace {

using gridtrain::config::LayerType;
using gridtrain::config::OptimizerConfig;
using gridtrain::config::OptimizerKind;
using gridtrain::config::Schedule;
using gridtrain::learner::Model;
using gridtrain::learner::Optimizer;

// Two tensors: a 1x1 weight and a bias of 1.
Model tiny_model() {
  gridtrain::config::ModelConfig mc;
  mc.input = {1};
  mc.layers = {{.type = LayerType::dense, .units = 1}, {.type = LayerType::softmax_cross_entropy}};
  return Model::build(mc).value();
}

OptimizerConfig config(OptimizerKind kind, double lr, double momentum = 0, double decay = 0) {
  OptimizerConfig c;
  c.kind = kind;
  c.learning_rate = lr;
  c.momentum = momentum;
  c.weight_decay = decay;
  c.schedule = Schedule::constant;
  c.step_every_epochs = 1;
  c.step_gamma = 1;
  return c;
}

}  // namespace

TEST_CASE("sgd steps against the gradient by the learning rate") {
  Optimizer opt(config(OptimizerKind::sgd, 0.1), 10, tiny_model());
  CHECK(opt.state().empty());  // no velocity to keep
  float w = 1.0f;
  const float g = 0.5f;
  opt.apply(0, {&w, 1}, {&g, 1}, 0.1);
  CHECK(w == doctest::Approx(0.95));
  opt.apply(0, {&w, 1}, {&g, 1}, 0.1);
  CHECK(w == doctest::Approx(0.90));
}

TEST_CASE("weight decay adds λ·w to the gradient") {
  Optimizer opt(config(OptimizerKind::sgd, 0.1, 0, 0.01), 10, tiny_model());
  float w = 2.0f;
  const float g = 0.5f;
  opt.apply(0, {&w, 1}, {&g, 1}, 0.1);
  CHECK(w == doctest::Approx(2.0 - 0.1 * (0.5 + 0.01 * 2.0)));
}

TEST_CASE("momentum keeps the learning rate inside the velocity: v <- μv - η(g + λw), w <- w + v") {
  Optimizer opt(config(OptimizerKind::momentum, 0.1, 0.9, 0.01), 10, tiny_model());
  REQUIRE(opt.state().size() == 2);  // one velocity per parameter, in the arena's layout
  float w = 1.0f;
  const float g = 0.5f;
  opt.apply(0, {&w, 1}, {&g, 1}, 0.1);
  const double v1 = -0.1 * (0.5 + 0.01 * 1.0);
  CHECK(opt.state()[0] == doctest::Approx(v1));
  CHECK(w == doctest::Approx(1.0 + v1));
  const double w1 = 1.0 + v1;
  opt.apply(0, {&w, 1}, {&g, 1}, 0.05);  // a new rate changes the new step only
  const double v2 = 0.9 * v1 - 0.05 * (0.5 + 0.01 * w1);
  CHECK(opt.state()[0] == doctest::Approx(v2));
  CHECK(w == doctest::Approx(w1 + v2));
  CHECK(opt.state()[1] == 0.0f);  // the bias's velocity was not touched
}

TEST_CASE("each tensor's velocity lives at that tensor's offset in the arena") {
  Optimizer opt(config(OptimizerKind::momentum, 1.0, 0.5), 10, tiny_model());
  float b = 0.0f;
  const float g = 2.0f;
  opt.apply(1, {&b, 1}, {&g, 1}, 1.0);
  CHECK(opt.state()[0] == 0.0f);
  CHECK(opt.state()[1] == -2.0f);
  CHECK(b == -2.0f);
  // A restored state (a checkpoint's) is the one the next step uses.
  opt.state()[1] = 4.0f;
  opt.apply(1, {&b, 1}, {&g, 1}, 1.0);
  CHECK(opt.state()[1] == 0.5f * 4.0f - 2.0f);
}

TEST_CASE("the constant schedule keeps the rate") {
  Optimizer opt(config(OptimizerKind::sgd, 0.3), 10, tiny_model());
  CHECK(opt.learning_rate(0) == 0.3);
  CHECK(opt.learning_rate(9.99) == 0.3);
  CHECK(opt.learning_rate(50) == 0.3);
}

TEST_CASE("the step schedule multiplies by γ at every step_every_epochs boundary") {
  auto c = config(OptimizerKind::sgd, 0.2);
  c.schedule = Schedule::step;
  c.step_every_epochs = 5;
  c.step_gamma = 0.1;
  Optimizer opt(c, 20, tiny_model());
  CHECK(opt.learning_rate(0) == doctest::Approx(0.2));
  CHECK(opt.learning_rate(4.99) == doctest::Approx(0.2));
  CHECK(opt.learning_rate(5) == doctest::Approx(0.02));
  CHECK(opt.learning_rate(9.5) == doctest::Approx(0.02));
  CHECK(opt.learning_rate(10) == doctest::Approx(0.002));
}

TEST_CASE("the cosine schedule falls from the rate to 0 over the run's epochs and stays there") {
  auto c = config(OptimizerKind::sgd, 0.4);
  c.schedule = Schedule::cosine;
  Optimizer opt(c, 8, tiny_model());
  CHECK(opt.learning_rate(0) == doctest::Approx(0.4));
  CHECK(opt.learning_rate(2) == doctest::Approx(0.4 * 0.5 * (1 + std::cos(std::numbers::pi / 4))));
  CHECK(opt.learning_rate(4) == doctest::Approx(0.2));
  CHECK(opt.learning_rate(8) == doctest::Approx(0.0));
  CHECK(opt.learning_rate(12) == doctest::Approx(0.0));
}

TEST_CASE("scale_with_nodes multiplies the rate by 1, N or sqrt(N), reached linearly over warmup_epochs") {
  const Model model = tiny_model();
  OptimizerConfig c;
  c.kind = OptimizerKind::sgd;
  c.learning_rate = 0.1;
  c.schedule = Schedule::constant;
  c.scale_with_nodes = gridtrain::config::NodeScaling::none;
  CHECK(Optimizer(c, 10, model).learning_rate(3, 16) == doctest::Approx(0.1));
  c.scale_with_nodes = gridtrain::config::NodeScaling::linear;
  CHECK(Optimizer(c, 10, model).learning_rate(3, 16) == doctest::Approx(1.6));
  CHECK(Optimizer(c, 10, model).learning_rate(3, 1) == doctest::Approx(0.1));
  CHECK(Optimizer(c, 10, model).learning_rate(3, 0) == doctest::Approx(0.1));  // no members known: as one
  c.scale_with_nodes = gridtrain::config::NodeScaling::sqrt;
  c.warmup_epochs = 2;
  const Optimizer warm(c, 10, model);
  CHECK(warm.learning_rate(0, 16) == doctest::Approx(0.1));   // the unscaled rate at the start
  CHECK(warm.learning_rate(1, 16) == doctest::Approx(0.25));  // half way: 1 + (4 - 1) / 2
  CHECK(warm.learning_rate(2, 16) == doctest::Approx(0.4));
  CHECK(warm.learning_rate(7, 16) == doctest::Approx(0.4));
  // With a schedule: the factor times the schedule's rate.
  c.schedule = Schedule::cosine;
  c.warmup_epochs = 0;
  CHECK(Optimizer(c, 10, model).learning_rate(5, 4) == doctest::Approx(0.1));  // 2 * 0.1 * 0.5
}
