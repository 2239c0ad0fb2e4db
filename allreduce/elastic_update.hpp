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
// (one tensor, under its lock), only where a mean came: m <- m + alpha * (mean - s), where s is what
// the round fetched. While nothing moved the model during the round (m == s) this is exactly the
// update above. When something did (the learner's steps, a round of another dimension), that change
// is kept whole instead of being shrunk by (1 - alpha), and, since the p peers' s average to the
// mean, a round that every peer applies leaves the sum of the line's models unchanged: concurrent
// rounds do not drift the cluster's mean. Where no mean came, the model keeps its current values.
// REQUIRES: offset + model_slice.size() <= round.partition().model_floats()
void elastic_update(std::span<float> model_slice, std::size_t offset, const Round& round, float alpha);

// One chunk of our block folded (Round::fold_target): our values, the chunk's mean and its elastic update in a single
// pass over the model slice (one tensor, under its lock), for each float s = m, mean = ((sum + s) + theirs)·inv
// (without the sum where `sum` is empty: two peers) and m ← m + α·(mean − s). Bit for bit what the snapshot, the
// Round's reduce and the update above give when the update follows the snapshot at once; one read and two writes
// of the slice rather than three passes and eight.
// REQUIRES: theirs, mean and (unless empty) sum have model_slice.size() elements
void fold_contribution(std::span<float> model_slice, std::span<const double> sum, std::span<const float> theirs,
                       std::span<float> mean, double inv, float alpha);

}  // namespace gridtrain::allreduce
