#include "learner/dataset.hpp"


#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "config/config.hpp"
#include "learner/idx.hpp"

namespace gridtrain::learner {

namespace {


constexpr int idx_classes = 10;  // MNIST and Fashion-MNIST

Error file_error(const std::string& path, std::string_view key, std::string message) {
  return Error{.source = path, .key = std::string(key), .message = std::move(message)};
}

}  // namespace

Result<Dataset> load_dataset(const std::string& images_path, const std::string& labels_path, bool normalize,
                             std::string_view images_key, std::string_view labels_key) {
  Result<IdxArray> images = read_idx(images_path, images_key);
  if (!images) return images.error();
  const std::vector<std::uint32_t>& dims = images.value().dims;
  if (dims.size() != 3 && dims.size() != 4)
    return file_error(images_path, images_key,
                      "expected images with 3 dimensions (count x rows x columns) or 4 (count x channels x rows x "
                      "columns), found " + std::to_string(dims.size()) +
                          (dims.size() == 1 ? " (is this a labels file?)" : ""));
  for (std::size_t i = 1; i < dims.size(); ++i)
    if (dims[i] == 0 || dims[i] > static_cast<std::uint32_t>(std::numeric_limits<int>::max()))
      return file_error(images_path, images_key,
                        "expected every sample extent in 1.." + std::to_string(std::numeric_limits<int>::max()) +
                            ", found " + std::to_string(dims[i]) + " in dimension " + std::to_string(i));

  Result<IdxArray> labels = read_idx(labels_path, labels_key);
  if (!labels) return labels.error();
  const std::vector<std::uint32_t>& label_dims = labels.value().dims;
  if (label_dims.size() != 1)
    return file_error(labels_path, labels_key,
                      "expected labels with 1 dimension (count), found " + std::to_string(label_dims.size()) +
                          (label_dims.size() >= 3 ? " (is this an images file?)" : ""));
  if (label_dims[0] != dims[0])
    return file_error(labels_path, labels_key,
                      "holds " + std::to_string(label_dims[0]) + " labels, but the images file " + images_path +
                          " holds " + std::to_string(dims[0]) + " images: expected one label per image");
  if (dims[0] == 0) return file_error(images_path, images_key, "holds no samples: expected at least one");

  Dataset out;
  out.count = dims[0];
  out.classes = idx_classes;
  if (dims.size() == 3) out.sample_shape.push_back(1);
  for (std::size_t i = 1; i < dims.size(); ++i) out.sample_shape.push_back(static_cast<int>(dims[i]));
  out.sample_floats = images.value().data.size() / out.count;

  const std::vector<std::uint8_t>& label_bytes = labels.value().data;
  out.labels.resize(out.count);
  for (std::size_t i = 0; i < out.count; ++i) {
    if (label_bytes[i] >= idx_classes)
      return file_error(labels_path, labels_key,
                        "label " + std::to_string(label_bytes[i]) + " of sample " + std::to_string(i) +
                            " (offset " + std::to_string(8 + i) + ") is out of range: expected 0.." +
                            std::to_string(idx_classes - 1));
    out.labels[i] = label_bytes[i];
  }

  // A byte has 256 values: map each once, then translate.
  const Normalization n = normalize ? fashion_mnist_normalization : Normalization{};
  std::array<float, 256> map{};
  for (int p = 0; p < 256; ++p) map[p] = (static_cast<float>(p) / 255.0f - n.mean) / n.std;
  const std::vector<std::uint8_t>& pixels = images.value().data;
  out.images.reserve(pixels.size());
  prefer_huge_pages(out.images.data(), pixels.size() * sizeof(float));
  out.images.resize(pixels.size());
  for (std::size_t i = 0; i < pixels.size(); ++i) out.images[i] = map[pixels[i]];
  return out;
}

Result<Dataset> load_train_set(const config::DataConfig& data) {
  return load_dataset(data.train_images, data.train_labels, data.normalize, "data.train_images",
                      "data.train_labels");
}

Result<Dataset> load_test_set(const config::DataConfig& data) {
  return load_dataset(data.test_images, data.test_labels, data.normalize, "data.test_images", "data.test_labels");
}

Normalization image_statistics(const Dataset& dataset) {
  if (dataset.images.empty()) return {};
  double sum = 0, squares = 0;
  for (float x : dataset.images) {
    sum += x;
    squares += static_cast<double>(x) * x;
  }
  const double n = static_cast<double>(dataset.images.size());
  const double mean = sum / n;
  return {static_cast<float>(mean), static_cast<float>(std::sqrt(std::max(0.0, squares / n - mean * mean)))};
}

void gather_samples(std::span<const float> images, std::span<const std::int32_t> all_labels,
                    std::size_t sample_floats, std::span<const std::uint32_t> order, float* inputs,
                    std::int32_t* labels) {
  for (std::size_t n = 0; n < order.size(); ++n) {
    const std::uint32_t s = order[n];
    std::memcpy(inputs + n * sample_floats, images.data() + s * sample_floats, sample_floats * sizeof(float));
    labels[n] = all_labels[s];
  }
}

}  // namespace gridtrain::learner
