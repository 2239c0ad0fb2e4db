#pragma once
// The per-layer operations every backend (learner/backend.hpp) implements: the CPU one on OpenBLAS, the CUDA one
// on cuBLAS/cuDNN. A layer sees only pointers into its backend's memory (host memory on the CPU, device memory
// on a GPU), so where the parameters live is the backend's business: a LayerStack gives the layers a working
// copy of the parameters, and a GPU backend keeps that copy on the device.
//
// Tensors are row-major and per minibatch: a batch of `batch` samples, each of its LayerShape's input or
// output floats; images are (channels, height, width) per sample, i.e. NCHW.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "learner/model.hpp"

namespace gridtrain::learner {

// A layer's parameters in backend memory: weight then bias, or none.
struct LayerParams {
  const float* weight = nullptr;
  const float* bias = nullptr;
};

// Where backward() writes the gradients of a layer's parameters.
struct LayerGrads {
  float* weight = nullptr;
  float* bias = nullptr;
};

// One layer of a model (dense, relu, conv2d, maxpool), made for batches of up to a maximum size; it owns the
// workspace it needs (im2col columns, pooling argmax), allocated once.
class Layer {
 public:
  virtual ~Layer() = default;

  // y = layer(x) for `batch` samples.
  // REQUIRES: 1 <= batch <= the layer's maximum batch; x, y do not overlap.
  virtual void forward(int batch, const float* x, float* y, LayerParams params) = 0;

  // Given dy = dL/dy, writes dx = dL/dx (unless dx is null: nothing upstream needs it) and the parameter
  // gradients, overwriting them (not adding). x and y are those of the forward().
  // REQUIRES: forward() on this batch was the layer's last call.
  virtual void backward(int batch, const float* x, const float* y, const float* dy, float* dx, LayerParams params,
                        LayerGrads grads) = 0;
};

struct LossResult {
  double loss = 0;  // cross-entropy, mean over the batch
  int correct = 0;  // samples whose highest score is their label (ties: the lowest class)
};

// What a Loss scored since its totals were last taken, summed over samples.
struct LossTotals {
  double loss = 0;  // summed cross-entropy
  std::uint64_t correct = 0;
  std::uint64_t samples = 0;

  LossTotals& operator+=(const LossTotals& o) {
    loss += o.loss;
    correct += o.correct;
    samples += o.samples;
    return *this;
  }
};

// softmax followed by cross-entropy, fused: numerically stable, and its gradient is simply p - onehot.
class Loss {
 public:
  virtual ~Loss() = default;

  // Scores `logits` (batch x classes, backend memory) against `labels` (host memory), keeping the
  // probabilities for backward(). A backend may return before the loss is computed: result() waits for it, so
  // that a training step can queue its backward pass and update before the host waits (a GPU never idles
  // mid-step while the host catches up).
  // REQUIRES: 1 <= batch <= the maximum batch; every label in [0, classes).
  virtual void score(int batch, const float* logits, const std::int32_t* labels) = 0;

  // The last score()'s loss, once computed. REQUIRES: score() ran, and no score() since whose result was read.
  virtual LossResult result() = 0;

  // score(), then result().
  LossResult forward(int batch, const float* logits, const std::int32_t* labels) {
    score(batch, logits, labels);
    return result();
  }

  // The sums of every score since the last call, then zero. They are kept where the loss is computed, so that a
  // training step need not wait for its own loss to be read (Learner::step with LossRead::later); this waits
  // for the last score.
  virtual LossTotals take_totals() = 0;

  // Backend memory for the maximum batch's labels, which a gather (Backend::gather) writes for score_gathered().
  virtual std::int32_t* gathered_labels() = 0;
  // score() with the labels already at gathered_labels().
  virtual void score_gathered(int batch, const float* logits) = 0;

  // dlogits = d(mean loss)/d(logits) = (softmax(logits) - onehot(labels)) / batch.
  // REQUIRES: score() on this batch was the last call (result() may come between).
  virtual void backward(int batch, const std::int32_t* labels, float* dlogits) = 0;
};

// Floats in a backend's memory, freed with it. Move-only.
class Buffer {
 public:
  using Release = void (*)(float*);

  Buffer() = default;
  Buffer(float* data, std::size_t size, Release release) : data_(data, release), size_(size) {}

  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  std::size_t size() const { return size_; }

 private:
  std::unique_ptr<float, Release> data_{nullptr, nullptr};
  std::size_t size_ = 0;
};

}  // namespace gridtrain::learner
