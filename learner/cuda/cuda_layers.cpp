#include "learner/cuda/cuda_layers.hpp"

#include <algorithm>
#include <compare>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "base/check.hpp"
#include "learner/cuda/cuda_kernels.hpp"

namespace gridtrain::learner::cuda {

namespace {

using config::LayerType;

// Model's shape_floats() lives in the learner library, which this module does not link.
std::size_t floats(const Shape& shape) {
  std::size_t n = 1;
  for (int e : shape) n *= static_cast<std::size_t>(e);
  return n;
}

// Row-major C (m x n) = alpha·op(A)·op(B) + beta·C, as learner/gemm.hpp's gemm(), FP32 matrices multiplied in the
// context's precision. cuBLAS is
// column-major, where a row-major matrix reads as its transpose: so compute Cᵀ = op(B)ᵀ·op(A)ᵀ.
void gemm(CudaContext& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  CUDA_CHECK(cublasGemmEx(ctx.cublas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
                          k, &alpha, b, CUDA_R_32F, ldb, a, CUDA_R_32F, lda, &beta, c, CUDA_R_32F, ldc,
                          ctx.gemm_compute(), CUBLAS_GEMM_DEFAULT));
}

// y = x·Wᵀ + b, with W (units, inputs): the CPU backend's three products, on cuBLAS.
class DenseLayer final : public Layer {
 public:
  DenseLayer(CudaContext& ctx, const LayerShape& shape)
      : ctx_(ctx), in_(static_cast<int>(floats(shape.input))), out_(shape.spec.units) {}

  void forward(int batch, const float* x, float* y, LayerParams p) override {
    gemm(ctx_, false, true, batch, out_, in_, 1.0f, x, in_, p.weight, in_, 0.0f, y, out_);
    CUDA_CHECK(add_bias(y, p.bias, batch, out_, 1, ctx_.compute()));
  }

  void backward(int batch, const float* x, const float*, const float* dy, float* dx, LayerParams p,
                LayerGrads g) override {
    gemm(ctx_, true, false, out_, in_, batch, 1.0f, dy, out_, x, in_, 0.0f, g.weight, in_);  // dW = dyᵀ·x
    CUDA_CHECK(bias_grad(dy, g.bias, batch, out_, 1, ctx_.compute()));
    if (dx) gemm(ctx_, false, false, batch, in_, out_, 1.0f, dy, out_, p.weight, in_, 0.0f, dx, in_);  // dx = dy·W
  }

 private:
  CudaContext& ctx_;
  int in_, out_;
};

class ReluLayer final : public Layer {
 public:
  ReluLayer(CudaContext& ctx, const LayerShape& shape) : ctx_(ctx), floats_(floats(shape.input)) {}

  void forward(int batch, const float* x, float* y, LayerParams) override {
    CUDA_CHECK(relu_forward(floats_ * batch, x, y, ctx_.compute()));
  }

  void backward(int batch, const float*, const float* y, const float* dy, float* dx, LayerParams, LayerGrads) override {
    if (dx) CUDA_CHECK(relu_backward(floats_ * batch, y, dy, dx, ctx_.compute()));
  }

 private:
  CudaContext& ctx_;
  std::size_t floats_;
};

// cuDNN descriptors, destroyed with their owner.
struct TensorDescriptor {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDescriptor() { CUDA_CHECK(cudnnCreateTensorDescriptor(&d)); }
  ~TensorDescriptor() { cudnnDestroyTensorDescriptor(d); }
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  void set(cudnnDataType_t type, int n, int c, int h, int w) {
    CUDA_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, type, n, c, h, w));
  }
};

struct FilterDescriptor {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDescriptor() { CUDA_CHECK(cudnnCreateFilterDescriptor(&d)); }
  ~FilterDescriptor() { cudnnDestroyFilterDescriptor(d); }
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;
};

struct ConvolutionDescriptor {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvolutionDescriptor() { CUDA_CHECK(cudnnCreateConvolutionDescriptor(&d)); }
  ~ConvolutionDescriptor() { cudnnDestroyConvolutionDescriptor(d); }
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;
};

struct PoolingDescriptor {
  cudnnPoolingDescriptor_t d = nullptr;
  PoolingDescriptor() { CUDA_CHECK(cudnnCreatePoolingDescriptor(&d)); }
  ~PoolingDescriptor() { cudnnDestroyPoolingDescriptor(d); }
  PoolingDescriptor(const PoolingDescriptor&) = delete;
  PoolingDescriptor& operator=(const PoolingDescriptor&) = delete;
};

// The most workspace one convolution algorithm may ask for; faster ones that want more are passed over.
constexpr std::size_t workspace_limit = std::size_t(256) << 20;

// How convolutions are computed: in learner.precision's arithmetic (fp32, the default: without tensor cores, as
// TF32 would miss the CPU backend by 1e-3; the choice per precision is kept apart), by the fastest deterministic
// algorithm measured on the layer's own shapes, Winograd excepted. Measured on an H200
// (bench/cuda_conv_algos.cpp, on the Fashion-MNIST CNN's convolutions at batch 64 and 256; BENCHMARKS.md):
//   - Winograd (non-fused) misses a direct sum by 1.4e-3 to 9.9e-3 of the tensor's scale, and was cuDNN's
//     heuristic first choice for the second convolution's filter gradient (3e-3 there, an H100): never used.
//   - FFT and FFT tiling stay within 1.8e-6, as do the GEMM-like ones summing in another order, and are often the
//     fastest (conv2's filter gradient at batch 64: FFT 0.078 ms, ALGO_1 0.305).
//   - cuDNN's heuristics list too few to choose from (two for that gradient, neither FFT), so each candidate is
//     timed on the layer's buffers, once per shape, as PyTorch's cudnn.benchmark does.
//   - Deterministic ones win over atomics (ALGO_0, ALGO_3), so that a step repeats its arithmetic; at those
//     shapes that cost at most 0.03 ms a call (conv1's filter gradient at batch 256: FFT 0.102, ALGO_3 0.072).
// The choice is kept per process and shape, so every learner of a process computes alike (the resume test
// compares two learners to 1e-6). Timing may choose differently in another process (conv2's forward pass at
// batch 64 was FFT tiling in one run, implicit GEMM in the next): two runs agree to float rounding, not bit for
// bit.
struct Choice {
  int algorithm = -1;
  std::size_t workspace = 0;
};

struct ConvolutionKey {
  int device, precision, pass, batch, channels, height, width, filters, kernel, stride, padding;
  auto operator<=>(const ConvolutionKey&) const = default;
};

std::mutex& choices_mutex() {
  static std::mutex m;
  return m;
}

std::map<ConvolutionKey, Choice>& choices() {
  static std::map<ConvolutionKey, Choice> m;
  return m;
}

enum Pass { forward_pass, filter_pass, data_pass };

// The candidates per pass (cuDNN's enums; Winograd left out) and which of them use atomics (cuDNN's docs).
constexpr cudnnConvolutionFwdAlgo_t forward_candidates[] = {
    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
    CUDNN_CONVOLUTION_FWD_ALGO_GEMM,          CUDNN_CONVOLUTION_FWD_ALGO_DIRECT,
    CUDNN_CONVOLUTION_FWD_ALGO_FFT,           CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING};
constexpr cudnnConvolutionBwdFilterAlgo_t filter_candidates[] = {
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT,
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3};
constexpr cudnnConvolutionBwdDataAlgo_t data_candidates[] = {
    CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING,
    CUDNN_CONVOLUTION_BWD_DATA_ALGO_0};
bool deterministic(cudnnConvolutionFwdAlgo_t) { return true; }
bool deterministic(cudnnConvolutionBwdFilterAlgo_t a) {
  return a != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 && a != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}
bool deterministic(cudnnConvolutionBwdDataAlgo_t a) { return a != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0; }

// Times each candidate that cuDNN supports here within the workspace limit: `need(algo, &bytes)` asks for its
// workspace, `run(algo, workspace, bytes)` runs it on the compute stream. Returns the fastest deterministic one,
// or the fastest if none is.
template <class Algo, std::size_t N, class Need, class Run>
Choice measure(CudaContext& ctx, const Algo (&candidates)[N], Need need, Run run, const char* what) {
  // Which algorithms run depends on the precision too: FFT has no BF16, say, and is passed over there.
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  Choice best_deterministic, best;
  float best_deterministic_ms = 0, best_ms = 0;
  try {
    for (const Algo algo : candidates) {
      std::size_t bytes = 0;
      if (need(algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > workspace_limit) continue;
      void* ws = ctx.workspace(bytes);
      if (run(algo, ws, bytes) != CUDNN_STATUS_SUCCESS) continue;  // a warm-up, and supported after all?
      constexpr int calls = 3;
      CUDA_CHECK(cudaEventRecord(start, ctx.compute()));
      for (int i = 0; i < calls; ++i) CUDA_CHECK(run(algo, ws, bytes));
      CUDA_CHECK(cudaEventRecord(stop, ctx.compute()));
      CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      const Choice choice{static_cast<int>(algo), bytes};
      if (best.algorithm < 0 || ms < best_ms) {
        best = choice;
        best_ms = ms;
      }
      if (deterministic(algo) && (best_deterministic.algorithm < 0 || ms < best_deterministic_ms)) {
        best_deterministic = choice;
        best_deterministic_ms = ms;
      }
    }
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (best_deterministic.algorithm >= 0) return best_deterministic;
  if (best.algorithm >= 0) return best;
  throw CudaError("cuDNN runs no " + std::string(config::to_string(ctx.precision())) + " " + what +
                  " algorithm for this convolution");
}

// Per sample: y = W ⋆ x + b (cross-correlation, as the CPU backend's im2col), W (filters, channels, k, k).
// In bf16, cuDNN convolves BF16 copies of x, W and dy, made here before each call, into BF16 outputs that are
// widened back into the FP32 buffers the rest of the stack reads (learner/cuda/cuda_context.hpp's table); the
// biases stay FP32 kernels of ours in every precision.
class Conv2dLayer final : public Layer {
 public:
  Conv2dLayer(CudaContext& ctx, const LayerShape& shape, int max_batch)
      : ctx_(ctx),
        channels_(shape.channels()),
        height_(shape.height()),
        width_(shape.width()),
        filters_(shape.spec.filters),
        kernel_(shape.spec.kernel),
        stride_(shape.spec.stride),
        padding_(shape.spec.padding),
        out_height_(shape.output[1]),
        out_width_(shape.output[2]),
        bf16_(ctx.precision() == config::Precision::bf16),
        data_type_(bf16_ ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT) {
    CUDA_CHECK(
        cudnnSetFilter4dDescriptor(w_.d, data_type_, CUDNN_TENSOR_NCHW, filters_, channels_, kernel_, kernel_));
    // Sums in FP32 in every precision (the compute type); the math type says whether tensor cores may take FP32
    // data as TF32 (tf32) or must not (fp32). BF16 data runs on tensor cores.
    CUDA_CHECK(cudnnSetConvolution2dDescriptor(conv_.d, padding_, padding_, stride_, stride_, 1, 1,
                                               CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDA_CHECK(cudnnSetConvolutionMathType(
        conv_.d, ctx.precision() == config::Precision::fp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
    if (bf16_) {
      const std::size_t weights = std::size_t(filters_) * channels_ * kernel_ * kernel_;
      x16_ = device_array<std::uint16_t>(std::size_t(max_batch) * channels_ * height_ * width_, ctx.compute());
      y16_ = device_array<std::uint16_t>(std::size_t(max_batch) * filters_ * out_height_ * out_width_, ctx.compute());
      w16_ = device_array<std::uint16_t>(weights, ctx.compute());
      dw16_ = device_array<std::uint16_t>(weights, ctx.compute());
    }
  }

  void forward(int batch, const float* x, float* y, LayerParams p) override {
    describe(batch);
    const float one = 1.0f, zero = 0.0f;
    const void* x_in = narrow(x, x16_.get(), x_floats(batch));
    const void* w_in = narrow(p.weight, w16_.get(), w_floats());
    void* y_out = bf16_ ? static_cast<void*>(y16_.get()) : y;
    auto run = [&](cudnnConvolutionFwdAlgo_t algo, void* ws, std::size_t bytes) {
      return cudnnConvolutionForward(ctx_.cudnn(), &one, x_.d, x_in, w_.d, w_in, conv_.d, algo, ws, bytes, &zero,
                                     y_.d, y_out);
    };
    const Choice c = choose(forward_pass, batch, [&] {
      return measure(
          ctx_, forward_candidates,
          [&](cudnnConvolutionFwdAlgo_t algo, std::size_t* bytes) {
            return cudnnGetConvolutionForwardWorkspaceSize(ctx_.cudnn(), x_.d, w_.d, conv_.d, y_.d, algo, bytes);
          },
          run, "forward");
    });
    CUDA_CHECK(run(static_cast<cudnnConvolutionFwdAlgo_t>(c.algorithm), ctx_.workspace(c.workspace), c.workspace));
    widen(y16_.get(), y, y_floats(batch));
    CUDA_CHECK(add_bias(y, p.bias, batch, filters_, out_height_ * out_width_, ctx_.compute()));
  }

  void backward(int batch, const float* x, const float*, const float* dy, float* dx, LayerParams p,
                LayerGrads g) override {
    describe(batch);
    const float one = 1.0f, zero = 0.0f;
    // In bf16 the copies are made again: forward()'s may have been of another batch (an evaluation's).
    const void* x_in = narrow(x, x16_.get(), x_floats(batch));
    const void* dy_in = narrow(dy, y16_.get(), y_floats(batch));
    void* dw_out = bf16_ ? static_cast<void*>(dw16_.get()) : g.weight;
    auto run_filter = [&](cudnnConvolutionBwdFilterAlgo_t algo, void* ws, std::size_t bytes) {
      return cudnnConvolutionBackwardFilter(ctx_.cudnn(), &one, x_.d, x_in, y_.d, dy_in, conv_.d, algo, ws, bytes,
                                            &zero, w_.d, dw_out);
    };
    const Choice f = choose(filter_pass, batch, [&] {
      return measure(
          ctx_, filter_candidates,
          [&](cudnnConvolutionBwdFilterAlgo_t algo, std::size_t* bytes) {
            return cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx_.cudnn(), x_.d, y_.d, conv_.d, w_.d, algo, bytes);
          },
          run_filter, "backward-filter");
    });
    CUDA_CHECK(run_filter(static_cast<cudnnConvolutionBwdFilterAlgo_t>(f.algorithm), ctx_.workspace(f.workspace),
                          f.workspace));
    widen(dw16_.get(), g.weight, w_floats());
    CUDA_CHECK(bias_grad(dy, g.bias, batch, filters_, out_height_ * out_width_, ctx_.compute()));
    if (!dx) return;
    const void* w_in = narrow(p.weight, w16_.get(), w_floats());
    void* dx_out = bf16_ ? static_cast<void*>(x16_.get()) : dx;  // x's copy is read by now: the stream orders it
    auto run_data = [&](cudnnConvolutionBwdDataAlgo_t algo, void* ws, std::size_t bytes) {
      return cudnnConvolutionBackwardData(ctx_.cudnn(), &one, w_.d, w_in, y_.d, dy_in, conv_.d, algo, ws, bytes, &zero,
                                          x_.d, dx_out);
    };
    const Choice d = choose(data_pass, batch, [&] {
      return measure(
          ctx_, data_candidates,
          [&](cudnnConvolutionBwdDataAlgo_t algo, std::size_t* bytes) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(ctx_.cudnn(), w_.d, y_.d, conv_.d, x_.d, algo, bytes);
          },
          run_data, "backward-data");
    });
    CUDA_CHECK(
        run_data(static_cast<cudnnConvolutionBwdDataAlgo_t>(d.algorithm), ctx_.workspace(d.workspace), d.workspace));
    widen(x16_.get(), dx, x_floats(batch));
  }

 private:
  // Sets the tensor descriptors for `batch` samples (an epoch's last minibatch may be smaller), checking the
  // output's shape against the model's the first time.
  void describe(int batch) {
    if (batch == described_) return;
    x_.set(data_type_, batch, channels_, height_, width_);
    y_.set(data_type_, batch, filters_, out_height_, out_width_);
    described_ = batch;
    int n = 0, c = 0, h = 0, w = 0;
    CUDA_CHECK(cudnnGetConvolution2dForwardOutputDim(conv_.d, x_.d, w_.d, &n, &c, &h, &w));
    if (n != batch || c != filters_ || h != out_height_ || w != out_width_)
      throw CudaError("cuDNN's conv2d output " + std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w) +
                      " differs from the model's " + std::to_string(filters_) + "x" + std::to_string(out_height_) +
                      "x" + std::to_string(out_width_));
  }

  // This layer's choice for `pass` at `batch`: this process's, measured by `measure_now` the first time. The
  // lock is held while measuring, so that learners sharing the GPU do not time each other's work.
  template <class Measure>
  Choice choose(Pass pass, int batch, Measure measure_now) {
    auto& mine = chosen_[pass];
    if (auto found = mine.find(batch); found != mine.end()) return found->second;
    const ConvolutionKey key{ctx_.device(), static_cast<int>(ctx_.precision()),
                             pass,          batch,
                             channels_,     height_,
                             width_,        filters_,
                             kernel_,       stride_,
                             padding_};
    std::lock_guard<std::mutex> hold(choices_mutex());
    auto found = choices().find(key);
    if (found == choices().end()) found = choices().emplace(key, measure_now()).first;
    return mine.emplace(batch, found->second).first->second;
  }

  std::size_t x_floats(int batch) const { return std::size_t(batch) * channels_ * height_ * width_; }
  std::size_t y_floats(int batch) const { return std::size_t(batch) * filters_ * out_height_ * out_width_; }
  std::size_t w_floats() const { return std::size_t(filters_) * channels_ * kernel_ * kernel_; }

  // What cuDNN reads for `from`: in bf16 its BF16 copy, made in `copy`; else `from` itself.
  const void* narrow(const float* from, std::uint16_t* copy, std::size_t n) {
    if (!bf16_) return from;
    CUDA_CHECK(to_bf16(n, from, copy, ctx_.compute()));
    return copy;
  }
  // In bf16, cuDNN's BF16 output `from`, widened into the FP32 `to`; else nothing (cuDNN wrote `to`).
  void widen(const std::uint16_t* from, float* to, std::size_t n) {
    if (bf16_) CUDA_CHECK(from_bf16(n, from, to, ctx_.compute()));
  }

  CudaContext& ctx_;
  int channels_, height_, width_, filters_, kernel_, stride_, padding_, out_height_, out_width_;
  bool bf16_;
  cudnnDataType_t data_type_;  // of x, y and W as cuDNN sees them
  TensorDescriptor x_, y_;
  FilterDescriptor w_;
  ConvolutionDescriptor conv_;
  // bf16 only: the BF16 copies. x16_ also takes dx before it is widened, y16_ both y and dy.
  DeviceArray<std::uint16_t> x16_, y16_, w16_, dw16_;
  int described_ = 0;
  std::map<int, Choice> chosen_[3];  // per pass, per batch: this process's choices, without the lock
};

// cuDNN's deterministic max pooling: backward() sends each output's gradient to its window's max, found again
// from x and y. Which of several equal maxima gets it is cuDNN's choice, which may differ from the CPU
// backend's (the first in row-major order); ties come only from equal inputs, such as a relu's zeros, whose
// gradient the relu stops anyway.
class MaxPoolLayer final : public Layer {
 public:
  MaxPoolLayer(CudaContext& ctx, const LayerShape& shape)
      : ctx_(ctx),
        channels_(shape.channels()),
        height_(shape.height()),
        width_(shape.width()),
        out_height_(shape.output[1]),
        out_width_(shape.output[2]) {
    const int size = shape.spec.size, s = shape.spec.stride;
    CUDA_CHECK(cudnnSetPooling2dDescriptor(pool_.d, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_NOT_PROPAGATE_NAN, size,
                                           size, 0, 0, s, s));
  }

  void forward(int batch, const float* x, float* y, LayerParams) override {
    describe(batch);
    const float one = 1.0f, zero = 0.0f;
    CUDA_CHECK(cudnnPoolingForward(ctx_.cudnn(), pool_.d, &one, x_.d, x, &zero, y_.d, y));
  }

  void backward(int batch, const float* x, const float* y, const float* dy, float* dx, LayerParams,
                LayerGrads) override {
    if (!dx) return;
    describe(batch);
    const float one = 1.0f, zero = 0.0f;
    CUDA_CHECK(cudnnPoolingBackward(ctx_.cudnn(), pool_.d, &one, y_.d, y, y_.d, dy, x_.d, x, &zero, x_.d, dx));
  }

 private:
  void describe(int batch) {
    if (batch == described_) return;
    x_.set(CUDNN_DATA_FLOAT, batch, channels_, height_, width_);
    y_.set(CUDNN_DATA_FLOAT, batch, channels_, out_height_, out_width_);
    described_ = batch;
  }

  CudaContext& ctx_;
  int channels_, height_, width_, out_height_, out_width_;
  TensorDescriptor x_, y_;
  PoolingDescriptor pool_;
  int described_ = 0;
};

class SoftmaxCrossEntropy final : public Loss {
 public:
  SoftmaxCrossEntropy(CudaContext& ctx, int classes, int max_batch)
      : ctx_(ctx),
        classes_(classes),
        probs_(device_array<float>(std::size_t(max_batch) * classes, ctx.compute())),
        labels_(device_array<std::int32_t>(std::size_t(max_batch), ctx.compute())),
        sums_(device_array<LossSums>(1, ctx.compute())),
        totals_(device_array<LossTotalSums>(1, ctx.compute())) {
    void* host = nullptr;
    CUDA_CHECK(cudaMallocHost(&host, sizeof(LossSums)));
    host_sums_ = {static_cast<LossSums*>(host), [](LossSums* p) { cudaFreeHost(p); }};
    CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  }
  ~SoftmaxCrossEntropy() override { cudaEventDestroy(copied_); }
  SoftmaxCrossEntropy(const SoftmaxCrossEntropy&) = delete;
  SoftmaxCrossEntropy& operator=(const SoftmaxCrossEntropy&) = delete;

  void score(int batch, const float* logits, const std::int32_t* labels) override {
    ctx_.upload(labels, labels_.get(), sizeof(std::int32_t) * batch);
    score_gathered(batch, logits);
  }

  std::int32_t* gathered_labels() override { return labels_.get(); }

  LossTotals take_totals() override {
    LossTotalSums t{};
    ctx_.download(totals_.get(), &t, sizeof t);  // after everything queued: every step's loss is in
    CUDA_CHECK(cudaMemsetAsync(totals_.get(), 0, sizeof t, ctx_.compute()));
    return {t.loss, t.correct, t.samples};
  }

  void score_gathered(int batch, const float* logits) override {
    CUDA_CHECK(
        softmax_cross_entropy(batch, classes_, logits, labels_.get(), probs_.get(), sums_.get(), totals_.get(),
                              ctx_.compute()));
    CUDA_CHECK(
        cudaMemcpyAsync(host_sums_.get(), sums_.get(), sizeof(LossSums), cudaMemcpyDeviceToHost, ctx_.compute()));
    // Inside a step being captured as a CUDA graph, the record must be a node of the graph that every replay
    // records again (an external record); a plain one would only order the capture's own streams.
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(ctx_.compute(), &capturing));
    if (capturing == cudaStreamCaptureStatusActive)
      CUDA_CHECK(cudaEventRecordWithFlags(copied_, ctx_.compute(), cudaEventRecordExternal));
    else
      CUDA_CHECK(cudaEventRecord(copied_, ctx_.compute()));
  }

  // The one wait of a training step. The step calls it after queueing its backward pass and update, so the GPU
  // works on those while the host waits here and then gathers the next minibatch; a wait before them left the
  // GPU idle until the host had queued them (about 6% of a step at batch 256 on an H100).
  LossResult result() override {
    CUDA_CHECK(cudaEventSynchronize(copied_));
    return {host_sums_->loss / host_sums_->batch, host_sums_->correct};
  }

  // The labels are forward()'s, already on the device.
  void backward(int batch, const std::int32_t*, float* dlogits) override {
    CUDA_CHECK(softmax_cross_entropy_grad(batch, classes_, probs_.get(), labels_.get(), dlogits, ctx_.compute()));
  }

 private:
  CudaContext& ctx_;
  int classes_;
  DeviceArray<float> probs_;
  DeviceArray<std::int32_t> labels_;
  DeviceArray<LossSums> sums_;
  DeviceArray<LossTotalSums> totals_;  // since the last take_totals()
  std::unique_ptr<LossSums, void (*)(LossSums*)> host_sums_{nullptr, nullptr};
  cudaEvent_t copied_ = nullptr;  // host_sums_ holds the last score()'s sums
};

}  // namespace

std::unique_ptr<Layer> make_layer(CudaContext& context, const LayerShape& layer, int max_batch) {
  switch (layer.spec.type) {
    case LayerType::dense:
      return std::make_unique<DenseLayer>(context, layer);
    case LayerType::relu:
      return std::make_unique<ReluLayer>(context, layer);
    case LayerType::conv2d:
      return std::make_unique<Conv2dLayer>(context, layer, max_batch);
    case LayerType::maxpool:
      return std::make_unique<MaxPoolLayer>(context, layer);
    case LayerType::flatten:
    case LayerType::softmax_cross_entropy:
      break;
  }
  precondition_violated("the cuda backend makes no " + std::string(config::to_string(layer.spec.type)) + " layer");
}

std::unique_ptr<Loss> make_loss(CudaContext& context, int classes, int max_batch) {
  return std::make_unique<SoftmaxCrossEntropy>(context, classes, max_batch);
}

}  // namespace gridtrain::learner::cuda
