// Model: shape inference, its errors, the parameter layout, and initialisation.

#include "learner/model.hpp"

#include <doctest/doctest.h>

#include <cmath>

#include "config/config.hpp"
#include "learner/init.hpp"
#include "learner/parameter_store.hpp"
#include "learner/reference_cnn.hpp"
#include "tests/base/require_ok.hpp"

namespace {

using gridtrain::config::LayerSpec;
using gridtrain::config::LayerType;
using gridtrain::config::ModelConfig;
using gridtrain::learner::Model;
using gridtrain::learner::ParameterStore;
using gridtrain::learner::reference_cnn;
using gridtrain::learner::Shape;

Model must_build(const ModelConfig& mc) {
  auto m = Model::build(mc);
  REQUIRE_OK(m);
  return m.value();
}

// The error's key and message, or a failed check.
gridtrain::Error must_fail(const ModelConfig& mc) {
  auto m = Model::build(mc);
  REQUIRE_FALSE(m.ok());
  return m.error();
}

double std_of(std::span<const float> v, double* mean = nullptr) {
  double s = 0, s2 = 0;
  for (float x : v) s += x;
  const double m = s / v.size();
  for (float x : v) s2 += (x - m) * (x - m);
  if (mean) *mean = m;
  return std::sqrt(s2 / v.size());
}

}  // namespace

TEST_CASE("the default MLP takes an image input and lays out weight then bias per dense layer") {
  const Model m = must_build(gridtrain::config::defaults().learner.model);
  CHECK(m.input() == Shape{1, 28, 28});
  CHECK(m.classes() == 10);
  REQUIRE(m.tensors().size() == 6);
  CHECK(m.tensors()[0].name == "layers[0].weight");
  CHECK(m.tensors()[0].shape == std::vector<int>{256, 784});  // dense flattens its input
  CHECK(m.tensors()[1].name == "layers[0].bias");
  CHECK(m.tensors()[1].shape == std::vector<int>{256});
  CHECK(m.tensors()[2].name == "layers[2].weight");
  CHECK(m.tensors()[2].shape == std::vector<int>{128, 256});
  CHECK(m.tensors()[5].name == "layers[4].bias");
  CHECK(m.parameter_count() == 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
}

TEST_CASE("the model's tensor offsets are the ParameterStore's") {
  const Model m = must_build(reference_cnn());
  ParameterStore store(m.tensors());
  REQUIRE(store.tensor_count() == m.tensors().size());
  for (std::size_t t = 0; t < store.tensor_count(); ++t) CHECK(store.tensor(t).offset == m.tensor_offset(t));
  CHECK(store.size() == m.parameter_count());
}

TEST_CASE("the CNN's shapes: same-padded convolutions, halving pools, then flat") {
  const Model m = must_build(reference_cnn());
  const auto& l = m.layers();
  CHECK(l[0].output == Shape{32, 28, 28});
  CHECK(l[2].output == Shape{32, 14, 14});
  CHECK(l[3].output == Shape{64, 14, 14});
  CHECK(l[5].output == Shape{64, 7, 7});
  CHECK(l[6].output == Shape{3136});
  CHECK(l[7].output == Shape{1024});
  CHECK(m.tensors()[0].shape == std::vector<int>{32, 1, 5, 5});
  CHECK(m.tensors()[2].shape == std::vector<int>{64, 32, 5, 5});
  CHECK(m.tensors()[4].shape == std::vector<int>{1024, 3136});
  CHECK(m.classes() == 10);
}

TEST_CASE("strided windows round their output extent down") {
  ModelConfig mc;
  mc.input = {3, 10, 9};
  mc.layers = {{.type = LayerType::conv2d, .filters = 4, .kernel = 3, .stride = 2, .padding = 0},
               {.type = LayerType::maxpool, .stride = 2, .size = 3},
               {.type = LayerType::flatten},
               {.type = LayerType::softmax_cross_entropy}};
  const Model m = must_build(mc);
  CHECK(m.layers()[0].output == Shape{4, 4, 4});  // (10-3)/2+1 = 4, (9-3)/2+1 = 4
  CHECK(m.layers()[1].output == Shape{4, 1, 1});
  CHECK(m.classes() == 4);
}

TEST_CASE("a hand-made layer with stride 0 takes the config's default stride") {
  ModelConfig mc;
  mc.input = {1, 8, 8};
  mc.layers = {{.type = LayerType::conv2d, .filters = 1, .kernel = 3},
               {.type = LayerType::maxpool, .size = 2},
               {.type = LayerType::flatten},
               {.type = LayerType::softmax_cross_entropy}};
  const Model m = must_build(mc);
  CHECK(m.layers()[0].spec.stride == 1);
  CHECK(m.layers()[1].spec.stride == 2);
  CHECK(m.layers()[1].output == Shape{1, 3, 3});
}

TEST_CASE("a kernel larger than its padded input is an error naming the layer") {
  ModelConfig mc;
  mc.input = {1, 4, 4};
  mc.layers = {{.type = LayerType::relu},
               {.type = LayerType::conv2d, .filters = 2, .kernel = 7, .stride = 1, .padding = 1},
               {.type = LayerType::flatten},
               {.type = LayerType::softmax_cross_entropy}};
  const auto e = must_fail(mc);
  CHECK(e.key == "learner.model.layers[1]");
  CHECK(e.message.find("7x7") != std::string::npos);
  CHECK(e.message.find("1x4x4") != std::string::npos);
  mc.layers[1].padding = 2;  // 4 + 2·2 = 8 >= 7: fits
  CHECK(Model::build(mc).ok());
}

TEST_CASE("a pool that shrinks the image to nothing is an error naming the layer") {
  ModelConfig mc;
  mc.input = {1, 12, 12};
  mc.layers = {{.type = LayerType::maxpool, .stride = 2, .size = 2},
               {.type = LayerType::maxpool, .stride = 2, .size = 2},
               {.type = LayerType::maxpool, .stride = 2, .size = 4},
               {.type = LayerType::flatten},
               {.type = LayerType::softmax_cross_entropy}};
  const auto e = must_fail(mc);
  CHECK(e.key == "learner.model.layers[2]");
  CHECK(e.message.find("3x3") != std::string::npos);
}

TEST_CASE("a convolution after the input is flattened is an error") {
  ModelConfig mc;
  mc.input = {1, 28, 28};
  mc.layers = {{.type = LayerType::flatten},
               {.type = LayerType::conv2d, .filters = 2, .kernel = 3, .stride = 1},
               {.type = LayerType::flatten},
               {.type = LayerType::softmax_cross_entropy}};
  const auto e = must_fail(mc);
  CHECK(e.key == "learner.model.layers[1]");
  CHECK(e.message.find("784") != std::string::npos);
}

TEST_CASE("the loss on an image is an error that says to flatten first") {
  ModelConfig mc;
  mc.input = {1, 8, 8};
  mc.layers = {{.type = LayerType::conv2d, .filters = 2, .kernel = 3, .stride = 1},
               {.type = LayerType::softmax_cross_entropy}};
  const auto e = must_fail(mc);
  CHECK(e.key == "learner.model.layers[1]");
  CHECK(e.message.find("2x6x6") != std::string::npos);
  CHECK(e.message.find("flatten") != std::string::npos);
}

TEST_CASE("a model without the loss last, or with a bad input, is an error") {
  ModelConfig mc;
  mc.input = {4};
  mc.layers = {{.type = LayerType::dense, .units = 3}};
  CHECK(must_fail(mc).key == "learner.model.layers");
  mc.layers = {{.type = LayerType::softmax_cross_entropy}, {.type = LayerType::softmax_cross_entropy}};
  CHECK(must_fail(mc).key == "learner.model.layers[0]");
  mc.layers = {{.type = LayerType::dense, .units = 0}, {.type = LayerType::softmax_cross_entropy}};
  CHECK(must_fail(mc).key == "learner.model.layers[0]");
  mc.layers = {{.type = LayerType::softmax_cross_entropy}};
  mc.input = {2, 0};
  CHECK(must_fail(mc).key == "learner.model.input");
  mc.input = {};
  CHECK(must_fail(mc).key == "learner.model.input");
}

TEST_CASE("a dense layer too large for int indexing is an error, not an overflow") {
  ModelConfig mc;
  mc.input = {1 << 20};
  mc.layers = {{.type = LayerType::dense, .units = 1 << 12}, {.type = LayerType::softmax_cross_entropy}};
  CHECK(must_fail(mc).key == "learner.model.layers[0]");
}

TEST_CASE("initialisation is deterministic in the seed") {
  const Model m = must_build(gridtrain::config::defaults().learner.model);
  const auto a = gridtrain::learner::initial_parameters(m, 7);
  const auto b = gridtrain::learner::initial_parameters(m, 7);
  const auto c = gridtrain::learner::initial_parameters(m, 8);
  CHECK(a == b);
  CHECK(a != c);
  // Pinned: nodes on other builds and machines must start from this same model.
  CHECK(a[0] == doctest::Approx(0.0911387).epsilon(1e-5));
}

TEST_CASE("weights feeding a relu get He's std, others Xavier's; biases start at 0") {
  const Model m = must_build(reference_cnn());
  const auto p = gridtrain::learner::initial_parameters(m, 3);
  auto tensor = [&](std::size_t t) {
    return std::span<const float>(p).subspan(m.tensor_offset(t), m.tensor_offset(t + 1) - m.tensor_offset(t));
  };
  struct Expect {
    std::size_t tensor;
    double std;
  };
  const Expect expects[] = {
      {0, std::sqrt(2.0 / 25)},           // conv 1x5x5, through maxpool to relu: He
      {2, std::sqrt(2.0 / 800)},          // conv 32x5x5: He
      {4, std::sqrt(2.0 / 3136)},         // dense 3136 -> 1024: He
      {6, std::sqrt(2.0 / (1024 + 10))},  // dense 1024 -> 10, into the loss: Xavier
  };
  for (const Expect& e : expects) {
    CAPTURE(e.tensor);
    double mean = 0;
    const double sd = std_of(tensor(e.tensor), &mean);
    CHECK(sd == doctest::Approx(e.std).epsilon(0.05));
    CHECK(std::abs(mean) < 0.1 * e.std);
    for (float b : tensor(e.tensor + 1)) REQUIRE(b == 0.0f);
  }
  CHECK(m.layers()[0].feeds_relu);
  CHECK_FALSE(m.layers()[9].feeds_relu);
}
