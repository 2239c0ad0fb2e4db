#pragma once
// The outer optimizer (allreduce.outer: nesterov): DiLoCo's outer step (Douillard et al. 2023), applied by each node
// to its own floats as each chunk's mean comes, instead of the elastic update.
//
// A node keeps, per float, its outer parameters o (where its outer steps left it) and an outer momentum v. A round
// fetches s, the model, and a, the outer parameters then (its anchor). The round's mean is the line's mean of the
// models it fetched; the pseudo-gradient is g = a - mean (how far the line moved from where this node's outer steps
// had left it when it fetched), and the step is SGD with Nesterov momentum on it, as PyTorch's SGD(nesterov=True):
//   v  <- mu·v + g
//   d  =  -eta·(g + mu·v)   (the outer step: a' = a + d)
//   m  <- m + (a + d - s)   (the model moves to a', the learner's steps since the fetch kept whole)
//   o  <- o + d
// Where no other round's step landed between the fetch and now, a = o and this is m <- o' + (m - s). Where one did
// (rounds in flight, the other dimensions' rounds), its move is in both m and o already, and every step is added,
// not set, so no move is counted twice. With eta = 1 and mu = 0, m moves by mean - s: the elastic update with
// α = 1, plain averaging. docs/design.md, "The outer optimizer", says how it composes across the grid's dimensions
// and with quorum rounds.

#include <cstddef>
#include <span>

namespace gridtrain::allreduce {

class Round;

struct OuterRates {
  float rate = 0.7f;      // eta
  float momentum = 0.9f;  // mu
};

// The step over plain vectors of one length: model, fetched (s), mean, anchor (a), outer (o) and velocity (v).
// Where model is the pending buffer of a deferred store, a + d - s is added to it instead of to the model: the same
// result once the owner adds it. o and v are updated in place.
// REQUIRES: every span of model.size() floats
void outer_step(std::span<float> model, std::span<const float> fetched, std::span<const float> mean,
                std::span<const float> anchor, std::span<float> outer, std::span<float> velocity, OuterRates rates);

// The step for the floats [offset, offset + model_slice.size()) of the round's model, where the round has means
// of two or more models (Round::count(c) >= 2); elsewhere nothing moves, o and v included. The mean is the round's
// result, or s plus the owner's delta where it sent one; s is the round's send buffer, which must hold the chunks
// (no fold, no send straight from the model). anchor holds, laid out as the send buffer, the outer parameters
// fetched with each chunk. outer_slice and velocity_slice are this node's o and v for the model slice's floats.
// REQUIRES: offset + model_slice.size() <= round.partition().model_floats() <= anchor.size(); the three slices
// alike in size
void outer_update(std::span<float> model_slice, std::span<float> outer_slice, std::span<float> velocity_slice,
                  std::size_t offset, const Round& round, std::span<const float> anchor, OuterRates rates);

}  // namespace gridtrain::allreduce
