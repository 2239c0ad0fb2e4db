#pragma once
// Choosing the learner's backend from learner.device:
//   cpu   the CPU backend;
//   cuda  the CUDA backend, or an error naming learner.device when there is none to be had (no CUDA module in
//         this build, no driver, no device), saying why;
//   auto  the CUDA backend when it can be had, else the CPU backend (and why not CUDA, for the log).
// and learner.precision: the CUDA backend computes in the precision asked for; the CPU backend in fp32 only, so
// auto that falls back to the CPU with tf32 or bf16 asked for is an error naming learner.precision and why there
// is no GPU (a run that asked for tf32 does not quietly train ten times slower in fp32). learner.device cpu with
// either is refused when the config is read (config/config.cpp).
//
// The CUDA backend is loaded at run time from libgridtrain_cuda.so, looked for in this order: the file named by
// the environment variable GRIDTRAIN_CUDA_MODULE; beside the running executable; in the build tree that made
// this library; then the dynamic linker's search path. The module is loaded once per process and never
// unloaded (its buffers may outlive any one backend).

#include <memory>
#include <string>

#include "config/config.hpp"
#include "base/result.hpp"
#include "learner/backend.hpp"

namespace gridtrain::learner {

struct BackendChoice {
  std::unique_ptr<Backend> backend;
  std::string note;  // for auto on the CPU: why not CUDA ("no CUDA device: ..."); else empty
};

Result<BackendChoice> make_backend(config::Device device, config::Precision precision = config::Precision::fp32);

// The CUDA backend computing in `precision`, or null and why not (`why` as in BackendChoice::note).
// Thread-safe.
std::unique_ptr<Backend> make_cuda_backend(std::string& why, config::Precision precision = config::Precision::fp32);

}  // namespace gridtrain::learner
