// The real data set, from Debian's dataset-fashion-mnist package; skipped where it is not installed.

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <string>

#include "learner/dataset.hpp"

using gridtrain::learner::Dataset;
using gridtrain::learner::image_statistics;
using gridtrain::learner::load_dataset;

namespace {

const std::string fashion_mnist_dir = "/usr/share/datasets/fashion-mnist/";

bool installed() {
  return std::filesystem::exists(fashion_mnist_dir + "train-images-idx3-ubyte.gz") &&
         std::filesystem::exists(fashion_mnist_dir + "t10k-labels-idx1-ubyte.gz");
}

void check_shape_and_labels(const Dataset& d, std::size_t count) {
  CHECK(d.count == count);
  CHECK(d.sample_shape == std::vector<int>{1, 28, 28});
  CHECK(d.sample_floats == 784);
  CHECK(d.images.size() == count * 784);
  REQUIRE(d.labels.size() == count);
  CHECK(std::count_if(d.labels.begin(), d.labels.end(), [](std::int32_t l) { return l < 0 || l >= 10; }) == 0);
}

}  // namespace

TEST_CASE("Fashion-MNIST loads: 60000 training and 10000 test images of 28x28, 6000 of each class in training") {
  if (!installed()) {
    MESSAGE("Fashion-MNIST is not installed under " << fashion_mnist_dir << "; skipped");
    return;
  }
  auto train = load_dataset(fashion_mnist_dir + "train-images-idx3-ubyte.gz",
                            fashion_mnist_dir + "train-labels-idx1-ubyte.gz", true);
  REQUIRE(train.ok());
  check_shape_and_labels(train.value(), 60000);
  std::array<int, 10> per_class{};
  for (std::int32_t label : train.value().labels) ++per_class[static_cast<std::size_t>(label)];
  for (int n : per_class) CHECK(n == 6000);

  // The constants are the training set's own: normalised, it has mean 0 and deviation 1.
  const auto stats = image_statistics(train.value());
  CHECK(stats.mean == doctest::Approx(0.0).epsilon(1e-5).scale(1.0));
  CHECK(stats.std == doctest::Approx(1.0).epsilon(1e-5));

  auto test = load_dataset(fashion_mnist_dir + "t10k-images-idx3-ubyte.gz",
                           fashion_mnist_dir + "t10k-labels-idx1-ubyte.gz", false);
  REQUIRE(test.ok());
  check_shape_and_labels(test.value(), 10000);
  const auto& pixels = test.value().images;
  CHECK(std::count_if(pixels.begin(), pixels.end(), [](float x) { return x < 0.0f || x > 1.0f; }) == 0);
}
