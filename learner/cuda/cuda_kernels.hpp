#pragma once
// The CUDA backend's own kernels (learner/cuda/cuda_kernels.cu): what cuBLAS and cuDNN do not do for it. Each
// launcher queues its kernel on `stream` and returns the launch's error (cudaSuccess when it was queued).
//
// The arithmetic mirrors the CPU backend (learner/layer_cpu.cpp) and the optimizer (learner/optimizer.cpp)
// operation for operation, without fused multiply-adds where the CPU has none, so that the two agree to the
// last bit where they compute the same sums in the same order (relu, the optimizer, the loss's gradient).
//
// Tensors are NCHW, as everywhere in the learner; a dense layer's (batch, units) is (batch, units, 1).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace gridtrain::learner::cuda {

// y[n, c, i] += bias[c] for n < batch, c < channels, i < plane.
cudaError_t add_bias(float* y, const float* bias, int batch, int channels, int plane, cudaStream_t stream);

// grad[c] = Σ over n < batch, i < plane of dy[n, c, i]; overwrites grad.
cudaError_t bias_grad(const float* dy, float* grad, int batch, int channels, int plane, cudaStream_t stream);

cudaError_t relu_forward(std::size_t n, const float* x, float* y, cudaStream_t stream);
// dx = y > 0 ? dy : 0 (decided on the output, as the CPU backend does).
cudaError_t relu_backward(std::size_t n, const float* y, const float* dy, float* dx, cudaStream_t stream);

// What the loss kernel leaves for the host: the batch's summed cross-entropy and its correct predictions.
struct LossSums {
  double loss;
  int correct;
  int batch;  // the rows summed: the host divides by it, whichever step (or replayed graph) wrote the sums
};

// Loss::take_totals()'s sums, on the device.
struct LossTotalSums {
  double loss;
  unsigned long long correct;
  unsigned long long samples;
};

// A training step's values that change from step to step, in device memory, so that kernels queued once (a step
// captured as a CUDA graph, learner/cuda/cuda_backend.hpp) read each step's own: where its minibatch starts in
// the epoch's order, and its learning rate.
struct StepScalars {
  std::uint64_t first;
  float learning_rate;
};
inline constexpr int kSetFirst = 1, kSetLearningRate = 2;
// Sets the fields `which` (kSetFirst | kSetLearningRate) names, in `stream`'s order: values travel as the
// kernel's arguments, so the host may change them again at once.
cudaError_t set_step_scalars(StepScalars* step, std::uint64_t first, float learning_rate, int which,
                             cudaStream_t stream);

// Softmax cross-entropy over `batch` rows of `classes` scores: probs gets each row's softmax, *sums the sum
// over rows of -log p[label] and the count of rows whose first highest score is their label; the same are added
// to *totals (what the host takes when it reports, Loss::take_totals).
// REQUIRES: every label in [0, classes).
cudaError_t softmax_cross_entropy(int batch, int classes, const float* logits, const std::int32_t* labels, float* probs,
                                  LossSums* sums, LossTotalSums* totals, cudaStream_t stream);

// dlogits = (probs - onehot(labels)) / batch.
cudaError_t softmax_cross_entropy_grad(int batch, int classes, const float* probs, const std::int32_t* labels,
                                       float* dlogits, cudaStream_t stream);

// One step of learner/optimizer.hpp's rule over n parameters: with velocity (momentum), v <- μ·v - η·(g + λ·w),
// w <- w + v; without (velocity null, sgd), w <- w - η·(g + λ·w). η is step->learning_rate, read when it runs.
cudaError_t optimizer_step(std::size_t n, float* weights, const float* grads, float* velocity, float momentum,
                           const StepScalars* step, float weight_decay, cudaStream_t stream);

// The mirror's merge of one tensor (learner/cuda/cuda_backend.hpp): `host` holds the store's values, just copied in;
// the elastic change since the last merge, d = host - base, becomes `host` (the pending delta), and
// published += d, base = published (what goes back to the store).
cudaError_t mirror_merge(std::size_t n, float* host, float* base, float* published, cudaStream_t stream);

// The learner's side of the mirror: params += delta (when delta is not null), then published = params.
cudaError_t mirror_publish(std::size_t n, float* params, const float* delta, float* published, cudaStream_t stream);

// A minibatch gathered on the device: with f = step->first (read when it runs), inputs[n] = images[order[f + n]]
// (sample_floats floats each) and labels[n] = labels_all[order[f + n]], n < batch.
cudaError_t gather_samples(const float* images, const std::int32_t* labels_all, std::size_t sample_floats,
                           const std::uint32_t* order, const StepScalars* step, int batch, float* inputs,
                           std::int32_t* labels, cudaStream_t stream);

// FP32 to BF16 (round to nearest even) and back, n values. BF16 values are held as their 16 bits, so that this
// header needs no CUDA header beyond the runtime's; they are __nv_bfloat16 in the kernels and CUDNN_DATA_BFLOAT16
// to cuDNN.
cudaError_t to_bf16(std::size_t n, const float* x, std::uint16_t* y, cudaStream_t stream);
cudaError_t from_bf16(std::size_t n, const std::uint16_t* x, float* y, cudaStream_t stream);

}  // namespace gridtrain::learner::cuda
