#pragma once
// The CUDA backend's layers and loss (the Layer and Loss of learner/layer.hpp), all on one CudaContext's compute
// stream: dense through cuBLAS, conv2d and maxpool through cuDNN, relu and the loss as kernels. Their pointers
// are device memory, except the loss's labels, which are host memory as the interface says.

#include <memory>

#include "learner/cuda/cuda_context.hpp"
#include "learner/layer.hpp"
#include "learner/model.hpp"

namespace gridtrain::learner::cuda {

// REQUIRES: layer.spec.type is dense, relu, conv2d or maxpool; context outlives the layer.
std::unique_ptr<Layer> make_layer(CudaContext& context, const LayerShape& layer, int max_batch);

// REQUIRES: context outlives the loss.
std::unique_ptr<Loss> make_loss(CudaContext& context, int classes, int max_batch);

}  // namespace gridtrain::learner::cuda
