#pragma once
// The initial parameters of a model, the same on every node and every backend for one seed (so that nodes of
// a cluster start from one model, and a CUDA node starts where a CPU node does).

#include <cstdint>
#include <vector>

#include "learner/model.hpp"

namespace gridtrain::learner {

// Weights of a layer that feeds a relu are drawn from N(0, 2/fan_in) (He et al. 2015); other weights from
// N(0, 2/(fan_in + fan_out)) (Glorot & Bengio 2010, "Xavier"). Biases are 0. For conv2d, fan_in is
// channels·k·k and fan_out filters·k·k.
double init_std(const LayerShape& layer);

// All the parameters in the arena's layout (Model::tensor_offset). Each tensor draws from its own stream,
// derived from the seed and its index, with a generator and transform spelled out here rather than taken from
// the standard library, whose distributions differ between implementations.
std::vector<float> initial_parameters(const Model& model, std::uint64_t seed);

}  // namespace gridtrain::learner
