#pragma once
// The CPU backend's layers and loss (the Layer and Loss of learner/layer.hpp), on the host: matrix products
// through OpenBLAS (learner/gemm.hpp), convolution as im2col + GEMM, one sample at a time so that the column
// buffer stays small (channels·k·k x output pixels).

#include <memory>

#include "learner/layer.hpp"
#include "learner/model.hpp"

namespace gridtrain::learner::cpu {

// REQUIRES: layer.spec.type is dense, relu, conv2d or maxpool.
std::unique_ptr<Layer> make_layer(const LayerShape& layer, int max_batch);

std::unique_ptr<Loss> make_loss(int classes, int max_batch);

}  // namespace gridtrain::learner::cpu
