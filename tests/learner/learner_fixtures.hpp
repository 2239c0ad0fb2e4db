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

// With a real elastic update beside it (m <- 0.98·m + 0.02·centre, once per learner step, as the allreduce
// would apply it through the store's locks), `learner` trains at least `min_steps` steps: training goes on, no
// step is lost (the update lands on whatever the tensor holds), the model stays finite and learns the train
// set past 0.9, and the store was shared with the backend all along. Under TSan, this is the data-race check of
// the locking contract.
void check_elastic_updates_beside_steps(Learner& learner, int min_steps);

}  // namespace gridtrain::learner::testing
