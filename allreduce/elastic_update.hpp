#pragma once

#include <cstddef>
#include <span>

namespace gridtrain::allreduce {

class Round;

// Elastic averaging (Algorithm 1, line 17): m <- (1 - alpha) * m + alpha * mean, with beta = 0 as
// in BIDMach. alpha = 1 replaces m by the mean exactly; alpha = 0 leaves it as it is.
// REQUIRES: model_slice.size() == mean_slice.size()
void elastic_update(std::span<float> model_slice, std::span<const float> mean_slice, float alpha);

// Applies a completed round's result to the model slice that starts at absolute offset `offset`
// (one tensor, under its lock), only where a mean came. Where none came, the model keeps its
// CURRENT values, not the fetched ones: the learner may have moved it since the fetch.
// REQUIRES: offset + model_slice.size() <= round.partition().model_floats()
void elastic_update(std::span<float> model_slice, std::size_t offset, const Round& round, float alpha);

}  // namespace gridtrain::allreduce
