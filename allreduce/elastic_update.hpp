#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace gridtrain::allreduce {

class Round;
struct FoldTarget;

// Elastic averaging (Algorithm 1, line 17): m <- (1 - alpha) * m + alpha * mean, with beta = 0 as
// in BIDMach. alpha = 1 replaces m by the mean exactly; alpha = 0 leaves it as it is.
// REQUIRES: model_slice.size() == mean_slice.size()
void elastic_update(std::span<float> model_slice, std::span<const float> mean_slice, float alpha);

// Applies a round's result to the model slice that starts at absolute offset `offset` (one tensor, under its
// lock), only where it came (Round::count(c) > 0): m <- m + alpha * (mean - s), s being our contribution to the
// chunk. Where the owner sent a delta (Round::delta(c): mean - s, s as it reached the owner) that is
// m <- m + alpha * delta; where it sent the mean, s is what the round fetched into its send buffer (which must
// hold the chunk: fetched just as the mean came, s is the model then, and the update moves it from there).
// While nothing moved the model during the round (m == s) this is the plain update above (within a rounding, for
// a delta). When something did (the learner's steps, a round of another dimension), that change is kept whole
// instead of being shrunk by (1 - alpha), and, since the p peers' s average to the mean, a round that every peer
// applies leaves the sum of the line's models unchanged: concurrent rounds do not drift the cluster's mean. Where
// nothing came, the model keeps its current values.
// REQUIRES: offset + model_slice.size() <= round.partition().model_floats()
void elastic_update(std::span<float> model_slice, std::size_t offset, const Round& round, float alpha);

// The same update for a model whose floats another thread owns (learner::UpdateMode::deferred): what it would add
// to the model, alpha * delta or alpha * (mean - s), is added to `pull_slice` instead, where the round has means;
// the model's owner adds the pull to the model later, between its own writes. Since that update moves m by the
// same amount whatever m is, applying the pull later gives the update's result (within a rounding) plus whatever
// the owner did meanwhile, as above.
// REQUIRES: offset + pull_slice.size() <= round.partition().model_floats()
void elastic_pull(std::span<float> pull_slice, std::size_t offset, const Round& round, float alpha);

// The reduce of one chunk of our block, over `n` floats from index `at` of each contribution: the mean of `own`
// (none where null) and theirs[0..k) (the other peers' contributions, each from its first float, in peer order),
// summed in double in that order. Writes the mean into `mean` (unless null) and, with `deltas`, in place of each of
// theirs its delta, float(mean - theirs). Where `model` is given (a folded chunk: Round::fold_target), our values
// are read from the model slice as it is now (`own` unused), and it gets its elastic update
// m <- (1 - alpha) * m + alpha * mean in the same pass: bit for bit what the reduce over a snapshot of the slice and
// the update above give.
// REQUIRES: mean or model; k > 0 or own or model; each of theirs has at + n floats
void reduce_chunk(std::size_t n, const float* own, float* const* theirs, std::uint32_t k, std::size_t at, double inv,
                  float* mean, bool deltas, float* model, float alpha);

// A folded chunk's reduce (Round::fold_target) over one slice of it: the model's floats from index `at` of the chunk
// (one tensor's part, under its lock), which get their update; the deltas, or the mean, written where `target` says.
void fold_chunk(std::span<float> model_slice, const FoldTarget& target, std::size_t at, float alpha);

}  // namespace gridtrain::allreduce
