#pragma once
// Model: the layers of learner.model with every shape resolved, and the parameter tensors they need, laid out
// as the ParameterStore holds them. It is a description, the same for every backend; a LayerStack runs it.

#include <cstddef>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "base/result.hpp"
#include "learner/parameter_store.hpp"

namespace gridtrain::learner {

// Shapes are per sample: (channels, height, width) for images, (features) once flat.
using Shape = std::vector<int>;

std::size_t shape_floats(const Shape& shape);
std::string shape_text(const Shape& shape);  // "1x28x28"

// One layer of a model, with the shapes it takes and gives.
struct LayerShape {
  config::LayerSpec spec;
  Shape input;
  Shape output;
  // dense and conv2d own two tensors, weight then bias, at these indices of Model::tensors(); others none.
  std::size_t first_tensor = 0;
  std::size_t tensor_count = 0;
  // Whether a relu follows (through maxpool/flatten, which commute with it): He initialisation, else Xavier.
  bool feeds_relu = false;

  std::size_t input_floats() const { return shape_floats(input); }
  std::size_t output_floats() const { return shape_floats(output); }
  // conv2d and maxpool see a 2-D input (height, width) as one channel.
  int channels() const { return input.size() == 3 ? input[0] : 1; }
  int height() const { return input[input.size() - 2]; }
  int width() const { return input[input.size() - 1]; }
};

class Model {
 public:
  // Resolves the shapes. An error names the layer, "learner.model.layers[i]", and says what does not fit.
  static Result<Model> build(const config::ModelConfig& config);

  const Shape& input() const { return input_; }
  std::size_t input_floats() const { return shape_floats(input_); }
  int classes() const { return classes_; }  // the width of the softmax_cross_entropy layer

  // Every layer in config order; the last is softmax_cross_entropy.
  const std::vector<LayerShape>& layers() const { return layers_; }

  // The parameter tensors, "layers[i].weight" and "layers[i].bias", in layer order: the ParameterStore's
  // layout. Dense weights are (units, inputs); conv2d weights are (filters, channels, kernel, kernel).
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  // Offset of tensor t in the arena, in floats; tensor_offset(tensors().size()) is the arena's size.
  std::size_t tensor_offset(std::size_t t) const { return offsets_[t]; }
  std::size_t parameter_count() const { return offsets_.back(); }

 private:
  Model() = default;

  Shape input_;
  int classes_ = 0;
  std::vector<LayerShape> layers_;
  std::vector<TensorSpec> tensors_;
  std::vector<std::size_t> offsets_{0};
};

}  // namespace gridtrain::learner
