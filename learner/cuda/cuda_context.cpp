#include "learner/cuda/cuda_context.hpp"

#include <algorithm>
#include <cstring>

namespace gridtrain::learner::cuda {

CudaContext::CudaContext(int device, config::Precision precision) : device_(device), precision_(precision) {
  CUDA_CHECK(cudaSetDevice(device_));
  // Non-blocking: the legacy default stream, which other code in the process may use, never serialises ours.
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  CUDA_CHECK(cublasCreate(&cublas_));
  CUDA_CHECK(cublasSetStream(cublas_, compute_));
  // The default math mode lets nothing but the compute type choose tensor cores: fp32's products stay FP32 (the
  // CPU backend is the reference, to 1e-4), and tf32 and bf16 say so in gemm_compute().
  CUDA_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  // A workspace of its own for cuBLAS (32 MiB, what it asks for on Hopper), set after the stream: a step captured
  // as a CUDA graph must not leave cuBLAS to allocate one while capturing.
  constexpr std::size_t cublas_workspace_bytes = std::size_t(32) << 20;
  cublas_workspace_ = device_array<unsigned char>(cublas_workspace_bytes, compute_);
  CUDA_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_.get(), cublas_workspace_bytes));
  CUDA_CHECK(cudnnCreate(&cudnn_));
  CUDA_CHECK(cudnnSetStream(cudnn_, compute_));
  for (Slot& slot : slots_) {
    void* pinned = nullptr;
    CUDA_CHECK(cudaMallocHost(&pinned, slot_bytes));
    slot.pinned = {static_cast<unsigned char*>(pinned), [](unsigned char* p) { cudaFreeHost(p); }};
    slot.staged = device_array<unsigned char>(slot_bytes, compute_);
    CUDA_CHECK(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&slot.free, cudaEventDisableTiming));
  }
  CUDA_CHECK(cudaStreamSynchronize(compute_));
}

CudaContext::~CudaContext() {
  // Nothing may throw here; a failure while tearing down leaves nothing to save.
  if (compute_) cudaStreamSynchronize(compute_);
  if (copy_) cudaStreamSynchronize(copy_);
  for (Slot& slot : slots_) {
    if (slot.copied) cudaEventDestroy(slot.copied);
    if (slot.free) cudaEventDestroy(slot.free);
  }
  if (cudnn_) cudnnDestroy(cudnn_);
  if (cublas_) cublasDestroy(cublas_);
  if (copy_) cudaStreamDestroy(copy_);
  if (compute_) cudaStreamDestroy(compute_);
}

cublasComputeType_t CudaContext::gemm_compute() const {
  switch (precision_) {
    case config::Precision::fp32:
      break;
    case config::Precision::tf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case config::Precision::bf16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
  }
  return CUBLAS_COMPUTE_32F;
}

void* CudaContext::workspace(std::size_t bytes) {
  if (bytes > workspace_bytes_) {
    CUDA_CHECK(cudaStreamSynchronize(compute_));  // the old workspace may still be in use
    workspace_.reset();
    workspace_ = device_array<unsigned char>(bytes, compute_);
    workspace_bytes_ = bytes;
    ++workspace_generation_;
  }
  return workspace_.get();
}

void CudaContext::upload(const void* host, void* device, std::size_t bytes) {
  const auto* from = static_cast<const unsigned char*>(host);
  auto* to = static_cast<unsigned char*>(device);
  for (std::size_t done = 0; done < bytes;) {
    const std::size_t n = std::min(slot_bytes, bytes - done);
    Slot& slot = slots_[next_slot_];
    next_slot_ ^= 1;
    // Double buffering: while this slot fills, the other one's bytes may still be crossing.
    CUDA_CHECK(cudaEventSynchronize(slot.free));
    std::memcpy(slot.pinned.get(), from + done, n);
    CUDA_CHECK(cudaMemcpyAsync(slot.staged.get(), slot.pinned.get(), n, cudaMemcpyHostToDevice, copy_));
    CUDA_CHECK(cudaEventRecord(slot.copied, copy_));
    CUDA_CHECK(cudaStreamWaitEvent(compute_, slot.copied, 0));
    CUDA_CHECK(cudaMemcpyAsync(to + done, slot.staged.get(), n, cudaMemcpyDeviceToDevice, compute_));
    CUDA_CHECK(cudaEventRecord(slot.free, compute_));
    done += n;
  }
}

void CudaContext::download(const void* device, void* host, std::size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, compute_));
  CUDA_CHECK(cudaStreamSynchronize(compute_));
}

void CudaContext::synchronize() { CUDA_CHECK(cudaStreamSynchronize(compute_)); }

}  // namespace gridtrain::learner::cuda
