#pragma once
// CudaContext: what the layers of one CUDA backend share. The device; the compute stream, on which every layer
// runs in order; the cuBLAS and cuDNN handles bound to it; the convolution workspace; and the minibatch's way
// in: pinned, double-buffered staging on a copy stream of its own.

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "config/enums.hpp"
#include "learner/cuda/cuda_error.hpp"

namespace gridtrain::learner::cuda {

// Device memory, freed with it.
struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }  // no check: nothing useful to do about a failed free
};
template <class T>
using DeviceArray = std::unique_ptr<T[], DeviceFree>;

// `count` Ts of device memory (at least one, so the pointer is never null), zeroed in `stream`'s order.
template <class T>
DeviceArray<T> device_array(std::size_t count, cudaStream_t stream) {
  const std::size_t bytes = sizeof(T) * (count ? count : 1);
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, bytes));
  DeviceArray<T> array(static_cast<T*>(p));
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream));
  return array;
}

// learner.precision, as each library is told it:
//              cuBLAS compute type (FP32 A, B, C)   cuDNN convolutions
//   fp32       CUBLAS_COMPUTE_32F                   FP32 data, CUDNN_FMA_MATH (no tensor cores)
//   tf32       CUBLAS_COMPUTE_32F_FAST_TF32         FP32 data, CUDNN_TENSOR_OP_MATH (TF32 tensor cores)
//   bf16       CUBLAS_COMPUTE_32F_FAST_16BF         BF16 copies of x, W and dy, FP32 compute type,
//                                                   CUDNN_TENSOR_OP_MATH; outputs back to FP32
// In every precision the weights, their gradients as the optimizer sees them, the activations between layers,
// the loss and the optimizer are FP32 (BF16 with FP32 master weights, as PyTorch's autocast): BF16 keeps FP32's
// exponent range, so no loss scaling is needed.
class CudaContext {
 public:
  // Throws CudaError when the device cannot be set up.
  CudaContext(int device, config::Precision precision);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  config::Precision precision() const { return precision_; }
  // cuBLAS's compute type for FP32 matrices in this precision (the table above).
  cublasComputeType_t gemm_compute() const;
  cudaStream_t compute() const { return compute_; }
  cublasHandle_t cublas() const { return cublas_; }
  cudnnHandle_t cudnn() const { return cudnn_; }

  // Device scratch of at least `bytes`, for cuDNN's algorithms; grows (after the compute stream drains), never
  // shrinks. The pointer stays valid until the next call that grows it, which changes workspace_generation():
  // a CUDA graph that captured the old pointer must not be replayed after that.
  void* workspace(std::size_t bytes);
  std::uint64_t workspace_generation() const { return workspace_generation_; }

  // Host memory to device memory, ordered on the compute stream like a kernel: later kernels see the data,
  // earlier ones still read what was there. The host memory may be reused as soon as this returns. The bytes go
  // through one of two pinned buffers onto one of two device buffers on the copy stream, which overlaps whatever
  // the compute stream has queued (the last step's backward, say); a device-to-device copy on the compute
  // stream then puts them in place.
  void upload(const void* host, void* device, std::size_t bytes);

  // Device memory to host memory, once the compute stream has done everything queued before.
  void download(const void* device, void* host, std::size_t bytes);

  // Waits for the compute stream.
  void synchronize();

 private:
  static constexpr std::size_t slot_bytes = std::size_t(4) << 20;

  int device_;
  config::Precision precision_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t copy_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  DeviceArray<unsigned char> workspace_;
  std::size_t workspace_bytes_ = 0;
  std::uint64_t workspace_generation_ = 0;
  DeviceArray<unsigned char> cublas_workspace_;  // cuBLAS's, set once, so it allocates nothing in a capture

  struct Slot {
    std::unique_ptr<unsigned char, void (*)(unsigned char*)> pinned{nullptr, nullptr};
    DeviceArray<unsigned char> staged;
    cudaEvent_t copied = nullptr;  // on the copy stream: the slot's bytes are on the device
    cudaEvent_t free = nullptr;    // on the compute stream: the slot's bytes are in place, the slot reusable
  };
  Slot slots_[2];
  int next_slot_ = 0;
};

}  // namespace gridtrain::learner::cuda
