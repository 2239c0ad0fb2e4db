#pragma once
// Every CUDA, cuBLAS and cuDNN call of the CUDA backend is checked: a failure throws a CudaError that names the
// call and gives the library's own words for what went wrong. The exception unwinds the sequence of calls under
// way, out through the Backend interface, to the Learner, which returns it as an Error (learner/backend.hpp):
// none goes further. Only the module's code includes this header.

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <stdexcept>
#include <string>

namespace gridtrain::learner::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess)
    throw CudaError(std::string(call) + ": " + cudaGetErrorString(status) + " (" + cudaGetErrorName(status) + ")");
}

inline void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) throw CudaError(std::string(call) + ": " + cublasGetStatusString(status));
}

inline void check(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) throw CudaError(std::string(call) + ": " + cudnnGetErrorString(status));
}

}  // namespace gridtrain::learner::cuda

// The call's text is the error's name for it: CUDA_CHECK(cudaMalloc(&p, bytes)) fails with
// "cudaMalloc(&p, bytes): out of memory (cudaErrorMemoryAllocation)".
#define CUDA_CHECK(call) ::gridtrain::learner::cuda::check((call), #call)
