#pragma once
// The reference CNN: the Fashion-MNIST model that the benchmarks time and the tests check shapes on, written
// once. conv 5x5x32 -> relu -> pool 2 -> conv 5x5x64 -> relu -> pool 2 -> dense 1024 -> relu -> dense 10, on
// 1x28x28 inputs; bench/pytorch_cnn.py builds the same model in PyTorch, to compare with.

#include "config/config.hpp"

namespace gridtrain::learner {

config::ModelConfig reference_cnn();

}  // namespace gridtrain::learner
