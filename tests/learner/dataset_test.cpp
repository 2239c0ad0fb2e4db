#include "learner/dataset.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "config/config.hpp"
#include "tests/config/temp_dir.hpp"
#include "tests/learner/idx_files.hpp"

using gridtrain::config::testing::TempDir;
using gridtrain::learner::Dataset;
using gridtrain::learner::fashion_mnist_normalization;
using gridtrain::learner::IdxArray;
using gridtrain::learner::IdxCompression;
using gridtrain::learner::image_statistics;
using gridtrain::learner::load_dataset;
using gridtrain::learner::write_idx;
using namespace gridtrain::learner::testing;

namespace {

// Writes images and labels into `dir` and returns their paths.
std::pair<std::string, std::string> write_pair(const TempDir& dir, const IdxArray& images, const IdxArray& labels,
                                               IdxCompression compression = IdxCompression::plain) {
  const std::string i = (dir.path() / "images.idx").string();
  const std::string l = (dir.path() / "labels.idx").string();
  REQUIRE(write_idx(i, images, compression));
  REQUIRE(write_idx(l, labels, compression));
  return {i, l};
}

}  // namespace

TEST_CASE("a dataset loads as count samples of shape {1, rows, cols}, pixels scaled to [0, 1]") {
  TempDir dir;
  const IdxArray images = make_images(7, 3, 2);
  const IdxArray labels = make_labels(7);
  for (auto compression : {IdxCompression::plain, IdxCompression::gzip}) {
    auto [ip, lp] = write_pair(dir, images, labels, compression);
    auto r = load_dataset(ip, lp, false);
    REQUIRE(r.ok());
    const Dataset& d = r.value();
    CHECK(d.count == 7);
    CHECK(d.sample_shape == std::vector<int>{1, 3, 2});
    CHECK(d.sample_floats == 6);
    CHECK(d.classes == 10);
    REQUIRE(d.images.size() == 42);
    for (std::size_t i = 0; i < d.images.size(); ++i) CHECK(d.images[i] == static_cast<float>(images.data[i]) / 255.0f);
    CHECK(d.labels == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6});
  }
}

TEST_CASE("four-dimensional images keep their channels in the sample shape") {
  TempDir dir;
  IdxArray images{{2, 3, 4, 5}, std::vector<std::uint8_t>(120, 9)};
  auto [ip, lp] = write_pair(dir, images, make_labels(2));
  auto r = load_dataset(ip, lp, false);
  REQUIRE(r.ok());
  CHECK(r.value().sample_shape == std::vector<int>{3, 4, 5});
  CHECK(r.value().sample_floats == 60);
}

TEST_CASE("normalisation standardises pixel/255 with Fashion-MNIST's training-set mean and deviation") {
  TempDir dir;
  IdxArray images{{1, 1, 3}, {0, 73, 255}};
  auto [ip, lp] = write_pair(dir, images, make_labels(1));
  auto r = load_dataset(ip, lp, true);
  REQUIRE(r.ok());
  const float mean = fashion_mnist_normalization.mean;
  const float std = fashion_mnist_normalization.std;
  CHECK(r.value().images[0] == doctest::Approx(-mean / std));
  CHECK(r.value().images[1] == doctest::Approx((73.0f / 255.0f - mean) / std));
  CHECK(r.value().images[2] == doctest::Approx((1.0f - mean) / std));
  CHECK(r.value().images[0] == doctest::Approx(-0.81027).epsilon(1e-4));
  CHECK(r.value().images[2] == doctest::Approx(2.02248).epsilon(1e-4));
}

TEST_CASE("image_statistics gives the mean and population deviation of the image floats") {
  Dataset d;
  d.images = {1.0f, 3.0f, 1.0f, 3.0f};
  CHECK(image_statistics(d).mean == doctest::Approx(2.0));
  CHECK(image_statistics(d).std == doctest::Approx(1.0));
}

TEST_CASE("images that are not three- or four-dimensional are refused, with a hint when files are swapped") {
  TempDir dir;
  auto [ip, lp] = write_pair(dir, make_labels(4), make_labels(4));
  auto r = load_dataset(ip, lp, false, "data.train_images", "data.train_labels");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().source == ip);
  CHECK(r.error().key == "data.train_images");
  CHECK(r.error().message ==
        "expected images with 3 dimensions (count x rows x columns) or 4 (count x channels x rows x columns), found "
        "1 (is this a labels file?)");

  auto [ip2, lp2] = write_pair(dir, make_images(4, 2, 2), make_images(4, 2, 2));
  auto swapped = load_dataset(ip2, lp2, false);
  REQUIRE_FALSE(swapped.ok());
  CHECK(swapped.error().source == lp2);
  CHECK(swapped.error().message == "expected labels with 1 dimension (count), found 3 (is this an images file?)");
}

TEST_CASE("a label outside 0..9 is refused, naming the sample and its byte offset") {
  TempDir dir;
  IdxArray labels = make_labels(5);
  labels.data[3] = 10;
  auto [ip, lp] = write_pair(dir, make_images(5, 2, 2), labels);
  auto r = load_dataset(ip, lp, false, "", "data.test_labels");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().source == lp);
  CHECK(r.error().key == "data.test_labels");
  CHECK(r.error().message == "label 10 of sample 3 (offset 11) is out of range: expected 0..9");
}

TEST_CASE("images and labels of different counts are refused, naming both files") {
  TempDir dir;
  auto [ip, lp] = write_pair(dir, make_images(6, 2, 2), make_labels(5));
  auto r = load_dataset(ip, lp, false);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().source == lp);
  CHECK(r.error().message ==
        "holds 5 labels, but the images file " + ip + " holds 6 images: expected one label per image");
}

TEST_CASE("a dataset of no samples, or of empty samples, is refused") {
  TempDir dir;
  auto [ip, lp] = write_pair(dir, IdxArray{{0, 2, 2}, {}}, IdxArray{{0}, {}});
  auto none = load_dataset(ip, lp, false);
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().message == "holds no samples: expected at least one");

  auto [ip2, lp2] = write_pair(dir, IdxArray{{2, 0, 2}, {}}, make_labels(2));
  auto empty = load_dataset(ip2, lp2, false);
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.error().message == "expected every sample extent in 1..2147483647, found 0 in dimension 1");
}

TEST_CASE("a broken images or labels file is refused with the reader's error and the config key") {
  TempDir dir;
  auto [ip, lp] = write_pair(dir, make_images(3, 2, 2), make_labels(3));
  write_bytes(lp, read_bytes(lp) + "!");
  auto r = load_dataset(ip, lp, false, "data.train_images", "data.train_labels");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().to_string() == lp + ": data.train_labels: expected 3 bytes of data (3) after the 8-byte header, "
                                      "found 4: 1 trailing bytes from offset 11");
}

TEST_CASE("the train and test sets load from the data section, errors naming its keys") {
  TempDir dir;
  gridtrain::config::DataConfig data;
  data.train_images = (dir.path() / "train-images").string();
  data.train_labels = (dir.path() / "train-labels").string();
  data.test_images = (dir.path() / "test-images").string();
  data.test_labels = (dir.path() / "test-labels").string();
  data.normalize = false;
  REQUIRE(write_idx(data.train_images, make_images(8, 2, 2)));
  REQUIRE(write_idx(data.train_labels, make_labels(8)));
  REQUIRE(write_idx(data.test_images, make_images(3, 2, 2)));

  auto train = gridtrain::learner::load_train_set(data);
  REQUIRE(train.ok());
  CHECK(train.value().count == 8);
  auto test = gridtrain::learner::load_test_set(data);
  REQUIRE_FALSE(test.ok());
  CHECK(test.error().key == "data.test_labels");
  REQUIRE(write_idx(data.test_labels, make_labels(3)));
  test = gridtrain::learner::load_test_set(data);
  REQUIRE(test.ok());
  CHECK(test.value().count == 3);
}
