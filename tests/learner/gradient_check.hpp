#pragma once
// Finite-difference gradient checks for any Backend: the CPU backend's tests use them, and a GPU backend's tests
// can run the same checks on its own layers.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "learner/backend.hpp"
#include "learner/model.hpp"

namespace gridtrain::learner::testing {

// The first layer of a model made of `layer` (then flatten, dense to 3 classes and the loss, so shape inference
// runs exactly as for a real model), with `input` per sample.
LayerShape layer_shape(const std::vector<int>& input, const config::LayerSpec& layer);

// How far an analytic gradient is from its finite difference, worst over all entries checked.
struct GradientReport {
  double worst = 0;   // max |analytic - numeric| / (atol + rtol * max(|analytic|, |numeric|)); pass if <= 1
  std::string where;  // the entry that was worst, e.g. "dx[12]" or "dW[3]"
  std::size_t checked = 0;
  // Entries at a kink (a relu's input or a pool's winner changes within ±eps): the central difference averages
  // two slopes there, so such an entry passes when the analytic gradient is one of the one-sided differences.
  // Only check_stack looks for them; a few per model are expected from random data.
  std::size_t kinks = 0;
  std::string first_kink;
};

// Checks that the report passed (some entries checked, the worst within tolerance), saying where it did not.
void require_close(const GradientReport& report);

// `n` draws from N(0, std²), as floats.
std::vector<float> normal(std::mt19937_64& rng, std::size_t n, double std = 1.0);

// Draws x, weight and bias, then checks backward() against central differences (step eps) of
// f = Σ r ⊙ layer(x) for a random r: dx for every input, dW and db for every parameter. `x_values` picks how x
// is drawn: "normal", "away_from_zero" (|x| >= 0.1, for relu) or "distinct" (values 0.05 apart, for maxpool).
GradientReport check_layer(Backend& backend, const LayerShape& shape, int batch, std::uint64_t seed,
                           const std::string& x_values, double eps, double atol, double rtol);

// Checks the loss's dlogits against central differences of the mean loss.
GradientReport check_loss(Backend& backend, int classes, int batch, std::uint64_t seed, double eps, double atol,
                          double rtol);

// Checks a whole LayerStack's parameter gradients (every `stride`-th parameter) against central differences of
// the mean loss over one random minibatch. Through a whole CNN some entries sit at a kink (see GradientReport);
// require_close() lets at most one in 50 checked entries pass that way.
GradientReport check_stack(Backend& backend, const Model& model, int batch, std::uint64_t seed, std::size_t stride,
                           double eps, double atol, double rtol);

}  // namespace gridtrain::learner::testing
