#include "learner/cuda/cuda_layers.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
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

// Row-major C (m x n) = alpha·op(A)·op(B) + beta·C, as learner/gemm.hpp's gemm(), in FP32 arithmetic. cuBLAS is
// column-major, where a row-major matrix reads as its transpose: so compute Cᵀ = op(B)ᵀ·op(A)ᵀ.
void gemm(CudaContext& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  CUDA_CHECK(cublasGemmEx(ctx.cublas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
                          k, &alpha, b, CUDA_R_32F, ldb, a, CUDA_R_32F, lda, &beta, c, CUDA_R_32F, ldc,
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
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
  void set(int n, int c, int h, int w) {
    CUDA_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
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

// The algorithms that compute a convolution as direct sums of products (implicit or explicit GEMM, direct).
// FFT and Winograd transform the data and round in the transform. For the Fashion-MNIST CNN's second
// convolution (32 to 64 filters of 5x5 on 14x14) cuDNN's heuristics rank FFT first for the forward pass and
// Winograd (non-fused) first for the filter gradient; that gradient missed the CPU backend by 3e-3 of the
// tensor's scale (an H100), where IMPLICIT_PRECOMP_GEMM and ALGO_1 stay within 1.6e-6 (an H200). Like TF32, that
// is a loss of accuracy a user did not ask for.
bool sums_directly(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
}
bool sums_directly(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}
bool sums_directly(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}

// From cuDNN's heuristic ranking (fastest first), the first algorithm that sums directly, in FP32 without tensor
// cores (TF32 would miss the CPU backend by 1e-3), within the workspace limit, preferring deterministic ones so
// that two runs of one config train alike.
template <class Perf>
Perf pick(const Perf* perf, int count, const char* what) {
  const Perf* any = nullptr;
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > workspace_limit || !sums_directly(p.algo)) continue;
    if (p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
    if (p.determinism == CUDNN_DETERMINISTIC) return p;
    if (!any) any = &p;
  }
  if (any) return *any;
  throw CudaError(std::string("cuDNN offers no FP32 ") + what + " algorithm for this convolution");
}

// Per sample: y = W ⋆ x + b (cross-correlation, as the CPU backend's im2col), W (filters, channels, k, k).
class Conv2dLayer final : public Layer {
 public:
  Conv2dLayer(CudaContext& ctx, const LayerShape& shape)
      : ctx_(ctx),
        channels_(shape.channels()),
        height_(shape.height()),
        width_(shape.width()),
        filters_(shape.spec.filters),
        out_height_(shape.output[1]),
        out_width_(shape.output[2]) {
    const int k = shape.spec.kernel, s = shape.spec.stride, pad = shape.spec.padding;
    CUDA_CHECK(cudnnSetFilter4dDescriptor(w_.d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, filters_, channels_, k, k));
    CUDA_CHECK(
        cudnnSetConvolution2dDescriptor(conv_.d, pad, pad, s, s, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDA_CHECK(cudnnSetConvolutionMathType(conv_.d, CUDNN_FMA_MATH));
  }

  void forward(int batch, const float* x, float* y, LayerParams p) override {
    const Algorithms& a = describe(batch);
    void* ws = ctx_.workspace(a.workspace);
    const float one = 1.0f, zero = 0.0f;
    CUDA_CHECK(cudnnConvolutionForward(ctx_.cudnn(), &one, x_.d, x, w_.d, p.weight, conv_.d, a.forward, ws, a.workspace,
                                       &zero, y_.d, y));
    CUDA_CHECK(add_bias(y, p.bias, batch, filters_, out_height_ * out_width_, ctx_.compute()));
  }

  void backward(int batch, const float* x, const float*, const float* dy, float* dx, LayerParams p,
                LayerGrads g) override {
    const Algorithms& a = describe(batch);
    void* ws = ctx_.workspace(a.workspace);
    const float one = 1.0f, zero = 0.0f;
    CUDA_CHECK(cudnnConvolutionBackwardFilter(ctx_.cudnn(), &one, x_.d, x, y_.d, dy, conv_.d, a.filter, ws, a.workspace,
                                              &zero, w_.d, g.weight));
    CUDA_CHECK(bias_grad(dy, g.bias, batch, filters_, out_height_ * out_width_, ctx_.compute()));
    if (dx)
      CUDA_CHECK(cudnnConvolutionBackwardData(ctx_.cudnn(), &one, w_.d, p.weight, y_.d, dy, conv_.d, a.data, ws,
                                              a.workspace, &zero, x_.d, dx));
  }

 private:
  struct Algorithms {
    cudnnConvolutionFwdAlgo_t forward;
    cudnnConvolutionBwdFilterAlgo_t filter;
    cudnnConvolutionBwdDataAlgo_t data;
    std::size_t workspace;
  };

  // Sets the tensor descriptors for `batch` samples and returns its algorithms, chosen once per batch size
  // (an epoch's last minibatch may be smaller) and kept.
  const Algorithms& describe(int batch) {
    if (batch != described_) {
      x_.set(batch, channels_, height_, width_);
      y_.set(batch, filters_, out_height_, out_width_);
      described_ = batch;
    }
    auto found = algorithms_.find(batch);
    if (found != algorithms_.end()) return found->second;

    int n = 0, c = 0, h = 0, w = 0;
    CUDA_CHECK(cudnnGetConvolution2dForwardOutputDim(conv_.d, x_.d, w_.d, &n, &c, &h, &w));
    if (n != batch || c != filters_ || h != out_height_ || w != out_width_)
      throw CudaError("cuDNN's conv2d output " + std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w) +
                      " differs from the model's " + std::to_string(filters_) + "x" + std::to_string(out_height_) +
                      "x" + std::to_string(out_width_));
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    cudnnConvolutionBwdFilterAlgoPerf_t flt[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    cudnnConvolutionBwdDataAlgoPerf_t dat[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int nf = 0, nw = 0, nd = 0;
    CUDA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(ctx_.cudnn(), x_.d, w_.d, conv_.d, y_.d,
                                                      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &nf, fwd));
    CUDA_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(ctx_.cudnn(), x_.d, y_.d, conv_.d, w_.d,
                                                             CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &nw, flt));
    CUDA_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx_.cudnn(), w_.d, y_.d, conv_.d, x_.d,
                                                           CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &nd, dat));
    const auto f = pick(fwd, nf, "forward");
    const auto bf = pick(flt, nw, "backward-filter");
    const auto bd = pick(dat, nd, "backward-data");
    // The heuristics' memory is an estimate; ask each algorithm for its exact need.
    std::size_t need_f = 0, need_bf = 0, need_bd = 0;
    CUDA_CHECK(cudnnGetConvolutionForwardWorkspaceSize(ctx_.cudnn(), x_.d, w_.d, conv_.d, y_.d, f.algo, &need_f));
    CUDA_CHECK(
        cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx_.cudnn(), x_.d, y_.d, conv_.d, w_.d, bf.algo, &need_bf));
    CUDA_CHECK(
        cudnnGetConvolutionBackwardDataWorkspaceSize(ctx_.cudnn(), w_.d, y_.d, conv_.d, x_.d, bd.algo, &need_bd));
    const Algorithms chosen{f.algo, bf.algo, bd.algo, std::max({need_f, need_bf, need_bd})};
    return algorithms_.emplace(batch, chosen).first->second;
  }

  CudaContext& ctx_;
  int channels_, height_, width_, filters_, out_height_, out_width_;
  TensorDescriptor x_, y_;
  FilterDescriptor w_;
  ConvolutionDescriptor conv_;
  int described_ = 0;
  std::map<int, Algorithms> algorithms_;
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
    x_.set(batch, channels_, height_, width_);
    y_.set(batch, channels_, out_height_, out_width_);
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
        sums_(device_array<LossSums>(1, ctx.compute())) {
    void* host = nullptr;
    CUDA_CHECK(cudaMallocHost(&host, sizeof(LossSums)));
    host_sums_ = {static_cast<LossSums*>(host), [](LossSums* p) { cudaFreeHost(p); }};
  }

  // The one wait of a training step: the host needs the loss now.
  LossResult forward(int batch, const float* logits, const std::int32_t* labels) override {
    ctx_.upload(labels, labels_.get(), sizeof(std::int32_t) * batch);
    CUDA_CHECK(
        softmax_cross_entropy(batch, classes_, logits, labels_.get(), probs_.get(), sums_.get(), ctx_.compute()));
    CUDA_CHECK(
        cudaMemcpyAsync(host_sums_.get(), sums_.get(), sizeof(LossSums), cudaMemcpyDeviceToHost, ctx_.compute()));
    ctx_.synchronize();
    return {host_sums_->loss / batch, host_sums_->correct};
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
  std::unique_ptr<LossSums, void (*)(LossSums*)> host_sums_{nullptr, nullptr};
};

}  // namespace

std::unique_ptr<Layer> make_layer(CudaContext& context, const LayerShape& layer, int) {
  switch (layer.spec.type) {
    case LayerType::dense:
      return std::make_unique<DenseLayer>(context, layer);
    case LayerType::relu:
      return std::make_unique<ReluLayer>(context, layer);
    case LayerType::conv2d:
      return std::make_unique<Conv2dLayer>(context, layer);
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
