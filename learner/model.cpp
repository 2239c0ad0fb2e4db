#include "learner/model.hpp"

#include <cstdint>
#include <limits>
#include <utility>

namespace gridtrain::learner {

using config::LayerType;

std::size_t shape_floats(const Shape& shape) {
  std::size_t n = 1;
  for (int e : shape) n *= static_cast<std::size_t>(e);
  return n;
}

std::string shape_text(const Shape& shape) {
  std::string out;
  for (int e : shape) out += (out.empty() ? "" : "x") + std::to_string(e);
  return out;
}

namespace {

// Extents and counts stay within int: BLAS takes int dimensions.
constexpr std::int64_t max_floats = std::numeric_limits<int>::max();

std::string layer_key(std::size_t i) { return "learner.model.layers[" + std::to_string(i) + "]"; }

Error layer_error(std::size_t i, std::string message) {
  return Error{.key = layer_key(i), .message = std::move(message)};
}

// Output extent of a window sliding over `in` (padded on both sides); 0 when the window does not fit.
std::int64_t slide(std::int64_t in, std::int64_t window, std::int64_t stride, std::int64_t padding) {
  const std::int64_t span = in + 2 * padding;
  return span < window ? 0 : (span - window) / stride + 1;
}

bool fits(std::int64_t floats) { return floats >= 1 && floats <= max_floats; }

// The output shape of layer i, or why it cannot take `in`.
Result<Shape> infer(std::size_t i, config::LayerSpec& spec, const Shape& in) {
  const std::string type(config::to_string(spec.type));
  const std::int64_t in_floats = static_cast<std::int64_t>(shape_floats(in));
  switch (spec.type) {
    case LayerType::dense:
      if (spec.units < 1) return layer_error(i, "expected dense units >= 1, found " + std::to_string(spec.units));
      if (!fits(in_floats * spec.units))
        return layer_error(i, "expected a dense weight of at most " + std::to_string(max_floats) + " floats, found " +
                                  std::to_string(spec.units) + "x" + std::to_string(in_floats));
      return Shape{spec.units};
    case LayerType::relu:
      return in;
    case LayerType::flatten:
      return Shape{static_cast<int>(in_floats)};
    case LayerType::softmax_cross_entropy:
      if (in.size() != 1)
        return layer_error(i, "expected a flat input (one score per class) for softmax_cross_entropy, found " +
                                  shape_text(in) + "; put a flatten or dense layer before it");
      return in;
    case LayerType::conv2d:
    case LayerType::maxpool: {
      if (in.size() < 2)
        return layer_error(i, "expected a (channels, height, width) input for " + type + ", found " + shape_text(in) +
                                  " (a flat vector)");
      const bool conv = spec.type == LayerType::conv2d;
      // A hand-made LayerSpec may leave stride 0: the config's default (conv2d 1, maxpool its size).
      if (spec.stride == 0) spec.stride = conv ? 1 : spec.size;
      const int window = conv ? spec.kernel : spec.size;
      if (conv && spec.filters < 1)
        return layer_error(i, "expected conv2d filters >= 1, found " + std::to_string(spec.filters));
      if (window < 1)
        return layer_error(
            i, "expected " + type + (conv ? " kernel" : " size") + " >= 1, found " + std::to_string(window));
      if (spec.stride < 1)
        return layer_error(i, "expected " + type + " stride >= 1, found " + std::to_string(spec.stride));
      if (spec.padding < 0 || (!conv && spec.padding != 0))
        return layer_error(
            i, "expected " + type + " padding " + (conv ? ">= 0" : "0") + ", found " + std::to_string(spec.padding));
      const int channels = in.size() == 3 ? in[0] : 1;
      const std::int64_t h = in[in.size() - 2], w = in[in.size() - 1];
      const std::int64_t oh = slide(h, window, spec.stride, spec.padding);
      const std::int64_t ow = slide(w, window, spec.stride, spec.padding);
      if (oh == 0 || ow == 0)
        return layer_error(i, "expected the " + std::to_string(window) + "x" + std::to_string(window) + " " + type +
                                  " window to fit its " + shape_text(in) + " input" +
                                  (spec.padding ? " padded by " + std::to_string(spec.padding) : std::string()) +
                                  ", found it larger");
      const int out_channels = conv ? spec.filters : channels;
      if (!fits(static_cast<std::int64_t>(out_channels) * oh * ow) ||
          (conv && !fits(static_cast<std::int64_t>(channels) * window * window * oh * ow)))
        return layer_error(i, "expected a " + type + " output of at most " + std::to_string(max_floats) +
                                  " floats per sample, found more");
      return Shape{out_channels, static_cast<int>(oh), static_cast<int>(ow)};
    }
  }
  return layer_error(i, "unknown layer type");
}

}  // namespace

Result<Model> Model::build(const config::ModelConfig& config) {
  Model model;
  if (config.input.empty() || config.input.size() > 3)
    return Error{.key = "learner.model.input",
                         .message = "expected 1 to 3 extents, found " + std::to_string(config.input.size())};
  std::int64_t input_floats = 1;
  for (int e : config.input) {
    if (e < 1)
      return Error{.key = "learner.model.input",
                           .message = "expected extents >= 1, found " + shape_text(config.input)};
    input_floats *= e;
    if (!fits(input_floats))
      return Error{.key = "learner.model.input",
                           .message = "expected at most " + std::to_string(max_floats) + " floats per sample"};
  }
  if (config.layers.empty() || config.layers.back().type != LayerType::softmax_cross_entropy)
    return Error{.key = "learner.model.layers",
                         .message = "expected the model to end with softmax_cross_entropy"};
  model.input_ = config.input;

  Shape shape = config.input;
  for (std::size_t i = 0; i < config.layers.size(); ++i) {
    LayerShape layer;
    layer.spec = config.layers[i];
    if (layer.spec.type == LayerType::softmax_cross_entropy && i + 1 != config.layers.size())
      return layer_error(i, "expected softmax_cross_entropy only as the last layer");
    auto out = infer(i, layer.spec, shape);
    if (!out.ok()) return out.error();
    layer.input = shape;
    layer.output = out.value();
    if (layer.spec.type == LayerType::dense || layer.spec.type == LayerType::conv2d) {
      const std::string prefix = "layers[" + std::to_string(i) + "].";
      const int outputs = layer.spec.type == LayerType::dense ? layer.spec.units : layer.spec.filters;
      Shape weight = layer.spec.type == LayerType::dense
                         ? Shape{outputs, static_cast<int>(layer.input_floats())}
                         : Shape{outputs, layer.channels(), layer.spec.kernel, layer.spec.kernel};
      layer.first_tensor = model.tensors_.size();
      layer.tensor_count = 2;
      model.tensors_.push_back({prefix + "weight", std::move(weight)});
      model.tensors_.push_back({prefix + "bias", {outputs}});
    }
    for (std::size_t j = i + 1; j < config.layers.size(); ++j) {
      const LayerType next = config.layers[j].type;
      if (next == LayerType::maxpool || next == LayerType::flatten) continue;
      layer.feeds_relu = next == LayerType::relu;
      break;
    }
    shape = layer.output;
    model.layers_.push_back(std::move(layer));
  }
  model.classes_ = shape[0];
  for (const TensorSpec& t : model.tensors_) model.offsets_.push_back(model.offsets_.back() + t.size());
  return model;
}

}  // namespace gridtrain::learner
