#include "learner/layer_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "base/check.hpp"
#include "learner/gemm.hpp"
#include "learner/layer_cpu_loop.hpp"

namespace gridtrain::learner::cpu {

namespace {

using config::LayerType;

// The elementwise loops: not inlined, with __restrict parameters, so they vectorize (learner/layer_cpu_loop.hpp).
[[gnu::noinline]] void add_rows(std::size_t rows, std::size_t cols, const float* __restrict x, float* __restrict sum) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* __restrict row = x + r * cols;
    vector_loop(cols, [=](std::size_t j) { sum[j] += row[j]; });
  }
}

[[gnu::noinline]] void relu(std::size_t n, const float* __restrict x, float* __restrict y) {
  vector_loop(n, [=](std::size_t i) { y[i] = std::max(x[i], 0.0f); });
}

[[gnu::noinline]] void relu_grad(std::size_t n, const float* __restrict y, const float* __restrict dy,
                                 float* __restrict dx) {
  vector_loop(n, [=](std::size_t i) {
    const float pass = dy[i], zero = 0.0f;
    dx[i] = y[i] > 0.0f ? pass : zero;
  });
}

// y = x·Wᵀ + b, with W (units, inputs).
class DenseLayer final : public Layer {
 public:
  explicit DenseLayer(const LayerShape& shape) : in_(static_cast<int>(shape.input_floats())), out_(shape.spec.units) {}

  void forward(int batch, const float* x, float* y, LayerParams p) override {
    for (int n = 0; n < batch; ++n) std::memcpy(y + std::size_t(n) * out_, p.bias, sizeof(float) * out_);
    gemm(false, true, batch, out_, in_, 1.0f, x, in_, p.weight, in_, 1.0f, y, out_);
  }

  void backward(int batch, const float* x, const float*, const float* dy, float* dx, LayerParams p,
                LayerGrads g) override {
    gemm(true, false, out_, in_, batch, 1.0f, dy, out_, x, in_, 0.0f, g.weight, in_);  // dW = dyᵀ·x
    std::fill_n(g.bias, out_, 0.0f);
    add_rows(batch, out_, dy, g.bias);
    if (dx) gemm(false, false, batch, in_, out_, 1.0f, dy, out_, p.weight, in_, 0.0f, dx, in_);  // dx = dy·W
  }

 private:
  int in_, out_;
};

class ReluLayer final : public Layer {
 public:
  explicit ReluLayer(const LayerShape& shape) : floats_(shape.input_floats()) {}

  void forward(int batch, const float* x, float* y, LayerParams) override { relu(floats_ * batch, x, y); }

  void backward(int batch, const float*, const float* y, const float* dy, float* dx, LayerParams, LayerGrads) override {
    if (dx) relu_grad(floats_ * batch, y, dy, dx);
  }

 private:
  std::size_t floats_;
};

// The geometry shared by conv2d and maxpool: a square window sliding over each channel plane.
struct Window {
  int channels, height, width;  // input
  int size, stride, padding;
  int out_height, out_width;

  explicit Window(const LayerShape& s)
      : channels(s.channels()),
        height(s.height()),
        width(s.width()),
        size(s.spec.type == LayerType::conv2d ? s.spec.kernel : s.spec.size),
        stride(s.spec.stride),
        padding(s.spec.padding),
        out_height(s.output[1]),
        out_width(s.output[2]) {}

  int in_plane() const { return height * width; }
  int out_plane() const { return out_height * out_width; }
};

[[gnu::noinline]] void add_to(std::size_t n, const float* __restrict x, float* __restrict y) {
  vector_loop(n, [=](std::size_t i) { y[i] += x[i]; });
}

int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// The output columns [first, last) where kernel column kw lands inside the input row (0 <= ow·s - p + kw <
// width), worked out once per tap so that the pixel loops have no bounds tests.
struct Columns {
  int first, last;
};

Columns valid_columns(const Window& w, int kw) {
  const int first = std::clamp(-floor_div(kw - w.padding, w.stride), 0, w.out_width);  // ceil((p - kw) / s)
  const int last = std::min(w.out_width, floor_div(w.width - 1 + w.padding - kw, w.stride) + 1);
  return {first, std::max(first, last)};
}

// Unfolds one sample (channels, height, width) into columns: row (c, kh, kw), column (oh, ow) holds the input
// pixel under kernel tap (kh, kw) at output (oh, ow), 0 in the padding.
void im2col(const Window& w, const float* x, float* col) {
  for (int c = 0; c < w.channels; ++c)
    for (int kh = 0; kh < w.size; ++kh)
      for (int kw = 0; kw < w.size; ++kw) {
        const auto [first, last] = valid_columns(w, kw);
        const int shift = kw - w.padding;  // input column = ow·stride + shift
        float* out = col + (std::size_t((c * w.size + kh) * w.size + kw)) * w.out_plane();
        for (int oh = 0; oh < w.out_height; ++oh, out += w.out_width) {
          const int ih = oh * w.stride - w.padding + kh;
          if (ih < 0 || ih >= w.height) {
            std::fill_n(out, w.out_width, 0.0f);
            continue;
          }
          const float* row = x + (std::size_t(c) * w.height + ih) * w.width;
          std::fill(out, out + first, 0.0f);
          if (w.stride == 1)
            std::copy(row + first + shift, row + last + shift, out + first);
          else
            for (int ow = first; ow < last; ++ow) out[ow] = row[ow * w.stride + shift];
          std::fill(out + last, out + w.out_width, 0.0f);
        }
      }
}

// The adjoint of im2col: adds every column entry back onto the pixel it came from.
// REQUIRES: x zeroed by the caller (it accumulates).
void col2im(const Window& w, const float* col, float* x) {
  for (int c = 0; c < w.channels; ++c)
    for (int kh = 0; kh < w.size; ++kh)
      for (int kw = 0; kw < w.size; ++kw) {
        const auto [first, last] = valid_columns(w, kw);
        const int shift = kw - w.padding;
        const float* in = col + (std::size_t((c * w.size + kh) * w.size + kw)) * w.out_plane();
        for (int oh = 0; oh < w.out_height; ++oh, in += w.out_width) {
          const int ih = oh * w.stride - w.padding + kh;
          if (ih < 0 || ih >= w.height) continue;
          float* row = x + (std::size_t(c) * w.height + ih) * w.width;
          if (w.stride == 1)
            add_to(static_cast<std::size_t>(last - first), in + first, row + first + shift);
          else
            for (int ow = first; ow < last; ++ow) row[ow * w.stride + shift] += in[ow];
        }
      }
}

// Per sample: y = W·im2col(x) + b, W (filters, channels·k·k).
class Conv2dLayer final : public Layer {
 public:
  explicit Conv2dLayer(const LayerShape& shape)
      : w_(shape),
        filters_(shape.spec.filters),
        taps_(w_.channels * w_.size * w_.size),
        col_(std::size_t(taps_) * w_.out_plane()) {}

  void forward(int batch, const float* x, float* y, LayerParams p) override {
    const int plane = w_.out_plane();
    for (int n = 0; n < batch; ++n) {
      im2col(w_, x + std::size_t(n) * w_.channels * w_.in_plane(), col_.data());
      float* yn = y + std::size_t(n) * filters_ * plane;
      for (int f = 0; f < filters_; ++f) std::fill_n(yn + std::size_t(f) * plane, plane, p.bias[f]);
      gemm(false, false, filters_, plane, taps_, 1.0f, p.weight, taps_, col_.data(), plane, 1.0f, yn, plane);
    }
  }

  void backward(int batch, const float* x, const float*, const float* dy, float* dx, LayerParams p,
                LayerGrads g) override {
    const int plane = w_.out_plane();
    const std::size_t in_floats = std::size_t(w_.channels) * w_.in_plane();
    std::fill_n(g.bias, filters_, 0.0f);
    for (int n = 0; n < batch; ++n) {
      const float* dyn = dy + std::size_t(n) * filters_ * plane;
      // Recomputed rather than kept from forward(): a batch of columns would be channels·k·k times the input.
      im2col(w_, x + n * in_floats, col_.data());
      gemm(false, true, filters_, taps_, plane, 1.0f, dyn, plane, col_.data(), plane, n == 0 ? 0.0f : 1.0f, g.weight,
           taps_);  // dW += dy_n·colᵀ
      for (int f = 0; f < filters_; ++f) {
        const float* row = dyn + std::size_t(f) * plane;
        g.bias[f] += std::accumulate(row, row + plane, 0.0f);
      }
      if (!dx) continue;
      // The columns are spent: reuse their buffer for dcol = Wᵀ·dy_n.
      gemm(true, false, taps_, plane, filters_, 1.0f, p.weight, taps_, dyn, plane, 0.0f, col_.data(), plane);
      float* dxn = dx + n * in_floats;
      std::fill_n(dxn, in_floats, 0.0f);
      col2im(w_, col_.data(), dxn);
    }
  }

 private:
  Window w_;
  int filters_, taps_;
  std::vector<float> col_;
};

// Keeps, per output, which input pixel of its window won, so backward() routes the gradient there only.
class MaxPoolLayer final : public Layer {
 public:
  MaxPoolLayer(const LayerShape& shape, int max_batch)
      : w_(shape), argmax_(std::size_t(max_batch) * w_.channels * w_.out_plane()) {}

  void forward(int batch, const float* x, float* y, LayerParams) override {
    const int planes = batch * w_.channels;
    for (int pl = 0; pl < planes; ++pl) {
      const float* in = x + std::size_t(pl) * w_.in_plane();
      float* out = y + std::size_t(pl) * w_.out_plane();
      std::int32_t* arg = argmax_.data() + std::size_t(pl) * w_.out_plane();
      for (int oh = 0; oh < w_.out_height; ++oh)
        for (int ow = 0; ow < w_.out_width; ++ow) {
          const int top = oh * w_.stride, left = ow * w_.stride;
          int best = top * w_.width + left;
          for (int kh = 0; kh < w_.size; ++kh)
            for (int kw = 0; kw < w_.size; ++kw) {
              const int i = (top + kh) * w_.width + left + kw;
              if (in[i] > in[best]) best = i;
            }
          out[oh * w_.out_width + ow] = in[best];
          arg[oh * w_.out_width + ow] = best;
        }
    }
  }

  void backward(int batch, const float*, const float*, const float* dy, float* dx, LayerParams, LayerGrads) override {
    if (!dx) return;
    const int planes = batch * w_.channels;
    std::fill_n(dx, std::size_t(planes) * w_.in_plane(), 0.0f);
    for (int pl = 0; pl < planes; ++pl) {
      float* in = dx + std::size_t(pl) * w_.in_plane();
      const float* out = dy + std::size_t(pl) * w_.out_plane();
      const std::int32_t* arg = argmax_.data() + std::size_t(pl) * w_.out_plane();
      // += : overlapping windows (stride < size) may pick the same pixel.
      for (int i = 0; i < w_.out_plane(); ++i) in[arg[i]] += out[i];
    }
  }

 private:
  Window w_;
  std::vector<std::int32_t> argmax_;
};

class SoftmaxCrossEntropy final : public Loss {
 public:
  SoftmaxCrossEntropy(int classes, int max_batch)
      : classes_(classes), probs_(std::size_t(max_batch) * classes), gathered_(static_cast<std::size_t>(max_batch)) {}

  std::int32_t* gathered_labels() override { return gathered_.data(); }
  void score_gathered(int batch, const float* logits) override { score(batch, logits, gathered_.data()); }

  void score(int batch, const float* logits, const std::int32_t* labels) override {
    result_ = {};
    LossResult& r = result_;
    double total = 0;
    for (int n = 0; n < batch; ++n) {
      const float* z = logits + std::size_t(n) * classes_;
      float* p = probs_.data() + std::size_t(n) * classes_;
      // Shifting by the max keeps exp() from overflowing; the argmax is the prediction.
      int top = 0;
      for (int k = 1; k < classes_; ++k)
        if (z[k] > z[top]) top = k;
      const float max = z[top];
      double sum = 0;
      for (int k = 0; k < classes_; ++k) {
        p[k] = std::exp(z[k] - max);
        sum += p[k];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int k = 0; k < classes_; ++k) p[k] *= inv;
      const std::int32_t label = labels[n];
      GRIDTRAIN_REQUIRE(label >= 0 && label < classes_);
      total += std::log(sum) - (double(z[label]) - max);  // -log softmax(z)[label]
      r.correct += top == label;
    }
    r.loss = total / batch;
    totals_ += {total, static_cast<std::uint64_t>(r.correct), static_cast<std::uint64_t>(batch)};
  }

  LossTotals take_totals() override { return std::exchange(totals_, {}); }

  LossResult result() override { return result_; }

  void backward(int batch, const std::int32_t* labels, float* dlogits) override {
    const float scale = 1.0f / static_cast<float>(batch);
    for (int n = 0; n < batch; ++n) {
      const float* p = probs_.data() + std::size_t(n) * classes_;
      float* d = dlogits + std::size_t(n) * classes_;
      for (int k = 0; k < classes_; ++k) d[k] = p[k] * scale;
      d[labels[n]] -= scale;
    }
  }

 private:
  int classes_;
  std::vector<float> probs_;
  std::vector<std::int32_t> gathered_;
  LossTotals totals_;
  LossResult result_;
};

}  // namespace

std::unique_ptr<Layer> make_layer(const LayerShape& layer, int max_batch) {
  switch (layer.spec.type) {
    case LayerType::dense:
      return std::make_unique<DenseLayer>(layer);
    case LayerType::relu:
      return std::make_unique<ReluLayer>(layer);
    case LayerType::conv2d:
      return std::make_unique<Conv2dLayer>(layer);
    case LayerType::maxpool:
      return std::make_unique<MaxPoolLayer>(layer, max_batch);
    case LayerType::flatten:
    case LayerType::softmax_cross_entropy:
      break;
  }
  precondition_violated("the cpu backend makes no " + std::string(config::to_string(layer.spec.type)) + " layer");
}

std::unique_ptr<Loss> make_loss(int classes, int max_batch) {
  return std::make_unique<SoftmaxCrossEntropy>(classes, max_batch);
}

}  // namespace gridtrain::learner::cpu
