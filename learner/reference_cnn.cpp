#include "learner/reference_cnn.hpp"

namespace gridtrain::learner {

config::ModelConfig reference_cnn() {
  using config::LayerType;
  config::ModelConfig mc;
  mc.input = {1, 28, 28};
  mc.layers = {{.type = LayerType::conv2d, .filters = 32, .kernel = 5, .stride = 1, .padding = 2},
               {.type = LayerType::relu},
               {.type = LayerType::maxpool, .stride = 2, .size = 2},
               {.type = LayerType::conv2d, .filters = 64, .kernel = 5, .stride = 1, .padding = 2},
               {.type = LayerType::relu},
               {.type = LayerType::maxpool, .stride = 2, .size = 2},
               {.type = LayerType::flatten},
               {.type = LayerType::dense, .units = 1024},
               {.type = LayerType::relu},
               {.type = LayerType::dense, .units = 10},
               {.type = LayerType::softmax_cross_entropy}};
  return mc;
}

}  // namespace gridtrain::learner
