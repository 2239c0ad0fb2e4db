#pragma once
// What the learner's tests share: small synthetic datasets, learners made or the test fails, their steps and
// evaluations likewise, their parameters read back, and the one test body that runs on every backend.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "config/config.hpp"
#include "learner/dataset.hpp"
#include "learner/learner.hpp"

namespace gridtrain::learner::testing {

// `count` points around `classes` centres 3 apart in `dims` dimensions (centre k at 3·e_k), noise std 0.5:
// separable with a wide margin.
Dataset blobs(std::size_t count, int dims = 8, int classes = 3, std::uint64_t seed = 5);

// `count` images of 1 x side x side, each class a faint bar in its own row band, under noise: a small CNN's
// loss falls from about 1.8 to 0.05 in 48 steps on the CPU, and its training accuracy passes 0.99 by 200.
Dataset images(std::size_t count, int side, int classes, std::uint64_t seed);

// A small CNN for images() of `side` x `side`: conv 8 5x5, relu, pool 2, conv 16 3x3, relu, pool 2, flatten,
// dense 32, relu, dense `classes`, the loss. The CUDA tests train and check it; the gradient check's kink case uses
// its draws on the CPU.
config::ModelConfig small_cnn(int side, int classes);

// An MLP for blobs(): dense 32, relu, dense `classes`, with momentum at a constant rate, on the CPU.
config::LearnerConfig mlp_config(int batch = 16, int dims = 8, int classes = 3);

// Each of these fails the test case (FAIL: it goes no further) when the learner returns an error.
std::unique_ptr<Learner> must_create(const config::LearnerConfig& config, Dataset data);
StepResult must_step(Learner& learner);
Evaluation must_evaluate(Learner& learner, const Dataset& data);
// The optimizer's state, handed to the host (Learner::optimizer_state).
std::span<float> must_optimizer_state(Learner& learner);

// The model being trained: the store, synchronized with the backend, then fetched.
std::vector<float> arena(Learner& learner);

// With a real elastic update beside it, once per learner step through the store's locks as the allreduce
// applies it (m <- 0.7·m + 0.3·c, where the centre c is the model as this thread fetched it one update before: a
// peer that trails by about a step, as the line's mean does), `learner` trains at least `min_steps` steps:
// training goes on, the model stays finite and learns the train set past 0.9, and the store was shared with the
// backend all along. Under TSan, this is the data-race check of the locking contract.
//
// The centre must move with training. A pull to a fixed centre (the initial model) once per step is a weight
// decay of 0.02 per step towards random weights: with the CUDA tests' CNN it holds the model at chance on every
// backend; that test passed on the CPU only while the pulling thread missed most steps.
void check_elastic_updates_beside_steps(Learner& learner, int min_steps);

// Every elastic update lands once: while `learner` steps, a thread adds 2^-10 to every parameter once per step,
// through the store's locks. The learner must be configured not to move (sgd, learning rate 0, no weight decay),
// so at the end the model must equal its start plus each update (float sums, as the thread adds them), both in
// the store and in the model the backend evaluates (checked against `reference`, a CPU learner of the same
// model given the store). A lost or doubled update is off by 2^-10, a hundred times the tolerance.
void check_elastic_updates_land_once(Learner& learner, Learner& reference, const Dataset& test);

}  // namespace gridtrain::learner::testing
