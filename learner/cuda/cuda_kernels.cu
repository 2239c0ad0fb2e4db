#include "learner/cuda/cuda_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace gridtrain::learner::cuda {

namespace {

constexpr int threads = 256;

// Elementwise kernels loop over a grid of at most this many blocks: enough to fill any current GPU, and the
// launch stays cheap for huge n.
constexpr std::size_t max_blocks = 4096;

unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > max_blocks ? max_blocks : b));
}

__device__ std::size_t first_index() { return std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ std::size_t grid_stride() { return std::size_t(gridDim.x) * blockDim.x; }

__global__ void add_bias_kernel(float* y, const float* bias, std::size_t n, int channels, int plane) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] += bias[(i / plane) % channels];
}

// One block per channel; a fixed reduction tree, so the sum does not depend on scheduling.
__global__ void bias_grad_kernel(const float* dy, float* grad, int batch, int channels, int plane) {
  __shared__ float partial[threads];
  const int c = blockIdx.x;
  const int per_channel = batch * plane;
  float sum = 0.0f;
  for (int j = threadIdx.x; j < per_channel; j += blockDim.x) {
    const int n = j / plane, i = j % plane;
    sum += dy[(std::size_t(n) * channels + c) * plane + i];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) grad[c] = partial[0];
}

__global__ void relu_forward_kernel(std::size_t n, const float* x, float* y) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = x[i] < 0.0f ? 0.0f : x[i];  // std::max(x, 0.0f)
}

__global__ void relu_backward_kernel(std::size_t n, const float* y, const float* dy, float* dx) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// One block: each thread takes whole rows (a row is only `classes` scores), then the block adds up.
__global__ void softmax_cross_entropy_kernel(int batch, int classes, const float* logits, const std::int32_t* labels,
                                             float* probs, LossSums* sums, LossTotalSums* totals) {
  __shared__ double loss[threads];
  __shared__ int correct[threads];
  double my_loss = 0;
  int my_correct = 0;
  for (int n = threadIdx.x; n < batch; n += blockDim.x) {
    const float* z = logits + std::size_t(n) * classes;
    float* p = probs + std::size_t(n) * classes;
    // As the CPU backend: shift by the max (the first highest score is the prediction), exp in float, sum in
    // double, scale by the float reciprocal.
    int top = 0;
    for (int k = 1; k < classes; ++k)
      if (z[k] > z[top]) top = k;
    const float max = z[top];
    double sum = 0;
    for (int k = 0; k < classes; ++k) {
      p[k] = expf(z[k] - max);
      sum += p[k];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int k = 0; k < classes; ++k) p[k] *= inv;
    const int label = labels[n];
    my_loss += log(sum) - (double(z[label]) - max);
    my_correct += top == label;
  }
  loss[threadIdx.x] = my_loss;
  correct[threadIdx.x] = my_correct;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      loss[threadIdx.x] += loss[threadIdx.x + half];
      correct[threadIdx.x] += correct[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *sums = {loss[0], correct[0], batch};
    // One thread, in stream order after the last step's kernel: no atomics needed.
    totals->loss += loss[0];
    totals->correct += static_cast<unsigned long long>(correct[0]);
    totals->samples += static_cast<unsigned long long>(batch);
  }
}

__global__ void softmax_cross_entropy_grad_kernel(std::size_t n, int classes, float scale, const float* probs,
                                                  const std::int32_t* labels, float* dlogits) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float d = __fmul_rn(probs[i], scale);
    dlogits[i] = int(i % classes) == labels[i / classes] ? __fsub_rn(d, scale) : d;
  }
}

// The optimizer's arithmetic with explicit rounding: no contraction into FMAs, so it equals the CPU's.
// The learning rate is read from device memory (StepScalars), so that a step replayed from a CUDA graph uses the
// rate set for it.
__global__ void sgd_kernel(std::size_t n, float* w, const float* g, const float* rate, float decay) {
  const float eta = *rate;
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    w[i] = __fsub_rn(w[i], __fmul_rn(eta, __fadd_rn(g[i], __fmul_rn(decay, w[i]))));
}

__global__ void momentum_kernel(std::size_t n, float* w, const float* g, float* v, float mu, const float* rate,
                                float decay) {
  const float eta = *rate;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float step = __fsub_rn(__fmul_rn(mu, v[i]), __fmul_rn(eta, __fadd_rn(g[i], __fmul_rn(decay, w[i]))));
    v[i] = step;
    w[i] = __fadd_rn(w[i], step);
  }
}

__global__ void mirror_merge_kernel(std::size_t n, float* host, float* base, float* published) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float d = __fsub_rn(host[i], base[i]);
    host[i] = d;
    const float p = __fadd_rn(published[i], d);
    published[i] = p;
    base[i] = p;
  }
}

__global__ void mirror_publish_kernel(std::size_t n, float* params, const float* delta, float* published) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float p = delta ? __fadd_rn(params[i], delta[i]) : params[i];
    params[i] = p;
    published[i] = p;
  }
}

// Round to nearest even, as PyTorch's autocast casts (and NaN stays NaN).
__global__ void to_bf16_kernel(std::size_t n, const float* x, __nv_bfloat16* y) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void from_bf16_kernel(std::size_t n, const __nv_bfloat16* x, float* y) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = __bfloat162float(x[i]);
}

// One block per sample: its threads copy the sample's floats, the first also its label. Where the minibatch
// starts in the order is read from device memory (StepScalars), as the learning rate is.
__global__ void gather_samples_kernel(const float* images, const std::int32_t* labels_all, std::size_t sample_floats,
                                      const std::uint32_t* order, const StepScalars* step, float* inputs,
                                      std::int32_t* labels) {
  const std::uint32_t sample = order[step->first + blockIdx.x];
  const std::size_t from = std::size_t(sample) * sample_floats;
  const std::size_t to = std::size_t(blockIdx.x) * sample_floats;
  for (std::size_t i = threadIdx.x; i < sample_floats; i += blockDim.x) inputs[to + i] = images[from + i];
  if (threadIdx.x == 0) labels[blockIdx.x] = labels_all[sample];
}

__global__ void set_step_scalars_kernel(StepScalars* step, std::uint64_t first, float learning_rate, int which) {
  if (which & kSetFirst) step->first = first;
  if (which & kSetLearningRate) step->learning_rate = learning_rate;
}

}  // namespace

cudaError_t add_bias(float* y, const float* bias, int batch, int channels, int plane, cudaStream_t stream) {
  const std::size_t n = std::size_t(batch) * channels * plane;
  add_bias_kernel<<<blocks_for(n), threads, 0, stream>>>(y, bias, n, channels, plane);
  return cudaGetLastError();
}

cudaError_t bias_grad(const float* dy, float* grad, int batch, int channels, int plane, cudaStream_t stream) {
  bias_grad_kernel<<<channels, threads, 0, stream>>>(dy, grad, batch, channels, plane);
  return cudaGetLastError();
}

cudaError_t relu_forward(std::size_t n, const float* x, float* y, cudaStream_t stream) {
  relu_forward_kernel<<<blocks_for(n), threads, 0, stream>>>(n, x, y);
  return cudaGetLastError();
}

cudaError_t relu_backward(std::size_t n, const float* y, const float* dy, float* dx, cudaStream_t stream) {
  relu_backward_kernel<<<blocks_for(n), threads, 0, stream>>>(n, y, dy, dx);
  return cudaGetLastError();
}

cudaError_t softmax_cross_entropy(int batch, int classes, const float* logits, const std::int32_t* labels, float* probs,
                                  LossSums* sums, LossTotalSums* totals, cudaStream_t stream) {
  softmax_cross_entropy_kernel<<<1, threads, 0, stream>>>(batch, classes, logits, labels, probs, sums, totals);
  return cudaGetLastError();
}

cudaError_t softmax_cross_entropy_grad(int batch, int classes, const float* probs, const std::int32_t* labels,
                                       float* dlogits, cudaStream_t stream) {
  const std::size_t n = std::size_t(batch) * classes;
  const float scale = 1.0f / static_cast<float>(batch);
  softmax_cross_entropy_grad_kernel<<<blocks_for(n), threads, 0, stream>>>(n, classes, scale, probs, labels, dlogits);
  return cudaGetLastError();
}

cudaError_t optimizer_step(std::size_t n, float* weights, const float* grads, float* velocity, float momentum,
                           const StepScalars* step, float weight_decay, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const float* rate = &step->learning_rate;
  if (velocity)
    momentum_kernel<<<blocks_for(n), threads, 0, stream>>>(n, weights, grads, velocity, momentum, rate, weight_decay);
  else
    sgd_kernel<<<blocks_for(n), threads, 0, stream>>>(n, weights, grads, rate, weight_decay);
  return cudaGetLastError();
}

cudaError_t mirror_merge(std::size_t n, float* host, float* base, float* published, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  mirror_merge_kernel<<<blocks_for(n), threads, 0, stream>>>(n, host, base, published);
  return cudaGetLastError();
}

cudaError_t mirror_publish(std::size_t n, float* params, const float* delta, float* published, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  mirror_publish_kernel<<<blocks_for(n), threads, 0, stream>>>(n, params, delta, published);
  return cudaGetLastError();
}

cudaError_t to_bf16(std::size_t n, const float* x, std::uint16_t* y, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  to_bf16_kernel<<<blocks_for(n), threads, 0, stream>>>(n, x, reinterpret_cast<__nv_bfloat16*>(y));
  return cudaGetLastError();
}

cudaError_t from_bf16(std::size_t n, const std::uint16_t* x, float* y, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  from_bf16_kernel<<<blocks_for(n), threads, 0, stream>>>(n, reinterpret_cast<const __nv_bfloat16*>(x), y);
  return cudaGetLastError();
}

cudaError_t gather_samples(const float* images, const std::int32_t* labels_all, std::size_t sample_floats,
                           const std::uint32_t* order, const StepScalars* step, int batch, float* inputs,
                           std::int32_t* labels, cudaStream_t stream) {
  if (batch <= 0) return cudaSuccess;
  gather_samples_kernel<<<static_cast<unsigned>(batch), threads, 0, stream>>>(images, labels_all, sample_floats, order,
                                                                                step, inputs, labels);
  return cudaGetLastError();
}

cudaError_t set_step_scalars(StepScalars* step, std::uint64_t first, float learning_rate, int which,
                             cudaStream_t stream) {
  set_step_scalars_kernel<<<1, 1, 0, stream>>>(step, first, learning_rate, which);
  return cudaGetLastError();
}

}  // namespace gridtrain::learner::cuda
