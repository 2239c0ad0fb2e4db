#pragma once
// Dataset: labelled samples in memory, in the form the learner trains and evaluates on, and loading one from a
// pair of IDX files (images and labels; gzip or plain).
//
// Normalisation. Pixels are always scaled to [0, 1] (pixel / 255). With `normalize`, they are then standardised,
// x -> (x - mean) / std, with the constants of Fashion-MNIST's training set (fashion_mnist_normalization), not
// with statistics of the file being loaded: the training and test sets, and every node, must see the same map,
// and a node must not need the whole training set to compute it. For other data (MNIST) the map is close to,
// but not exactly, a standardisation; training does not depend on it being exact.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace gridtrain::config {
struct DataConfig;
}

namespace gridtrain::learner {

struct Dataset {
  std::vector<float> images;         // count * sample_floats, row-major, already normalised
  std::vector<std::int32_t> labels;  // count, each in [0, classes)
  std::size_t count = 0;
  std::vector<int> sample_shape;  // e.g. {1, 28, 28}
  std::size_t sample_floats = 0;  // product of sample_shape
  int classes = 10;
};

// A minibatch of host memory: inputs[n] = images[order[n]] (sample_floats floats each) and labels[n] =
// all_labels[order[n]], n < order.size(). The Learner's own gather and the CPU backend's (Backend::gather).
void gather_samples(std::span<const float> images, std::span<const std::int32_t> all_labels,
                    std::size_t sample_floats, std::span<const std::uint32_t> order, float* inputs,
                    std::int32_t* labels);

// The standardisation x -> (x - mean) / std applied to pixel / 255.
struct Normalization {
  float mean = 0.0f;
  float std = 1.0f;
};

// Fashion-MNIST's training set: mean and (population) standard deviation of pixel / 255 over all 60000 x 784
// pixels.
inline constexpr Normalization fashion_mnist_normalization{0.28604060f, 0.35302424f};

// Loads images (u8, 3-D: count x rows x columns, giving sample_shape {1, rows, columns}; or 4-D: count x
// channels x rows x columns) and labels (u8, 1-D, each < 10). The two must hold the same number of samples, at
// least one. `images_key` / `labels_key` name the config keys that gave the paths, for errors.
Result<Dataset> load_dataset(const std::string& images_path, const std::string& labels_path, bool normalize,
                                     std::string_view images_key = {}, std::string_view labels_key = {});

// The training set and the test set (the evaluation input) named by the data section, with its normalisation.
Result<Dataset> load_train_set(const config::DataConfig& data);
Result<Dataset> load_test_set(const config::DataConfig& data);

// The mean and population standard deviation of all of `dataset`'s image floats (computed in double).
Normalization image_statistics(const Dataset& dataset);

}  // namespace gridtrain::learner
