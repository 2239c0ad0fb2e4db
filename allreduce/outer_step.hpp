#pragma once
// The outer optimizer (allreduce.outer: nesterov): DiLoCo's outer step (Douillard et al. 2023), applied by each node
// to its own floats as each chunk's mean comes, instead of the elastic update.
//
// A node keeps, per float, its outer parameters o (where its last outer step left it) and an outer momentum v. A
// round's mean is the line's mean of the models it fetched; the pseudo-gradient is g = o - mean (how far the line
// moved from where this node's last outer step left it), and the step is SGD with Nesterov momentum on it, as
// PyTorch's SGD(nesterov=True):
//   v  <- mu·v + g
//   o' <- o - eta·(g + mu·v)
//   m  <- o' + (m - s)     (s: what the round fetched; m - s: the learner's steps since, kept whole)
// With eta = 1 and mu = 0, o' is the mean: plain averaging (elastic with α = 1). docs/design.md, "The outer
// optimizer", says how it composes across the grid's dimensions and with quorum rounds.

#include <cstddef>
#include <span>

namespace gridtrain::allreduce {

class Round;

struct OuterRates {
  float rate = 0.7f;      // eta
  float momentum = 0.9f;  // mu
};

// The step over plain vectors of one length: model, fetched (s), mean, outer (o) and velocity (v). Where model is
// the pending buffer of a deferred store (`pull`), o' - s is added to it instead of to the model: the same result
// once the owner adds it. o and v are updated in place.
// REQUIRES: every span of model.size() floats
void outer_step(std::span<float> model, std::span<const float> fetched, std::span<const float> mean,
                std::span<float> outer, std::span<float> velocity, OuterRates rates);

// The step for the floats [offset, offset + model_slice.size()) of the round's model, where the round has means
// (Round::count(c) > 0); elsewhere nothing moves, o and v included. The mean is the round's result, or s plus the
// owner's delta where it sent one; s is the round's send buffer, which must hold the chunks (no fold, no send
// straight from the model). outer_slice and velocity_slice are this node's o and v for the same floats.
// REQUIRES: offset + model_slice.size() <= round.partition().model_floats(); the three slices alike in size
void outer_update(std::span<float> model_slice, std::span<float> outer_slice, std::span<float> velocity_slice,
                  std::size_t offset, const Round& round, OuterRates rates);

}  // namespace gridtrain::allreduce
