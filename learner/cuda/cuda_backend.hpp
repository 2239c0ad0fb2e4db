#pragma once
// CudaBackend: the learner's GPU backend, as the rest of the learner sees it. Its layers run on the device:
// dense through cuBLAS (FP32), conv2d and maxpool through cuDNN, relu, the loss, the biases and the optimizer
// as kernels of its own. Beyond Backend, it keeps the parameters and the optimizer state on the device.
//
// It is built into a module of its own, libgridtrain_cuda.so (learner/cuda/), which learner/backend_factory.cpp
// loads only when learner.device asks for a GPU: nothing else links a CUDA library, so every binary starts where
// there is no GPU or no driver. This header needs no CUDA header.
//
// Where the parameters live. The device holds the model the learner trains (the LayerStack's working copy),
// the optimizer's velocity, and three more arena-sized buffers; the optimizer runs there after every backward,
// and nothing crosses PCIe on the step's path but the minibatch and the loss. The ParameterStore stays the
// host-side copy that the allreduce fetches and elastically updates, under its per-tensor locks, and a mirror
// keeps the two together:
//   - publish (learner thread, at the end of a step, when the mirror is idle): on the compute stream,
//     params += delta (the elastic change the last cycle brought, if any), then published = params;
//   - cycle (the mirror's own thread and stream, overlapping the next steps): for each tensor, in reverse order
//     and under its lock alone, copy the store's values up, delta = store - base (what the allreduce changed
//     since the last cycle), published += delta, base = published, and copy published back into the store.
// Every optimizer step and every elastic update lands once: the store receives the learner's steps, and the
// device receives the allreduce's changes as a delta, added to whatever the learner has made of the model
// since (as the CPU learner adds its step to whatever the store holds). With no one else writing the store,
// delta is exactly 0 and training equals the CPU learner's arithmetic.
//
// What it costs: one cycle moves the arena up and down once (2 · 4 · N bytes for N parameters), on the copy
// engines, while the SMs train; cycles run back to back, so the store trails the device by about one cycle
// (a few steps), and an elastic update reaches the device one cycle after it landed. The store pages are
// pinned in place (cudaHostRegister), so the copies need no staging copy on the host.

#include <cstddef>
#include <span>

#include "config/config.hpp"
#include "learner/layer.hpp"
#include "learner/model.hpp"
#include "learner/parameter_store.hpp"

namespace gridtrain::learner {

class CudaBackend : public Backend {
 public:
  // Takes over the training of `store`'s model: params and grads are a LayerStack's working copy and gradients
  // (device memory, the arena's layout); allocates the optimizer state and the mirror's buffers; pins the
  // store's arena; starts the mirror. Then load()s.
  // REQUIRES: called once; store, params and grads outlive the backend (the backend unpins and stops first).
  virtual void attach(ParameterStore& store, const Model& model, const config::OptimizerConfig& optimizer,
                      float* params, const float* grads, std::span<const float> optimizer_state) = 0;

  // Makes the device model equal to the store (each tensor read under its lock) and the velocity equal to
  // `optimizer_state` (empty for sgd), dropping any elastic change in flight: what the store holds is taken
  // as the whole truth (a restored checkpoint, a warm start).
  // REQUIRES: attached; no step in flight.
  virtual void load(std::span<const float> optimizer_state) = 0;

  // The optimizer step on the device (after LayerStack::backward()), then a publish if the mirror is idle.
  // Errors of the mirror's thread surface here, as exceptions.
  // REQUIRES: attached.
  virtual void update(double learning_rate) = 0;

  // Returns once the store holds the device model as of this call (one full mirror cycle) and the device holds
  // every elastic change the store had by then: for a checkpoint, or an evaluation that must see the store.
  // REQUIRES: attached.
  virtual void flush() = 0;

  // The velocity, device to host (empty for sgd). REQUIRES: attached; state.size() as attach's.
  virtual void download_state(std::span<float> optimizer_state) = 0;

  // Bytes the mirror has copied between host and device since attach (both directions), and its cycles.
  virtual std::size_t mirror_bytes() const = 0;
  virtual std::size_t mirror_cycles() const = 0;
};

// The module's one entry point. Makes the backend on the first CUDA device, or returns null and writes why
// (e.g. "no CUDA device: ...") into `error`. `abi` must be cuda_backend_abi: a module built from other headers
// refuses to run.
inline constexpr int cuda_backend_abi = 1;
inline constexpr const char* cuda_backend_entry = "gridtrain_cuda_create";
using CudaBackendCreate = CudaBackend* (*)(int abi, char* error, std::size_t error_size);

}  // namespace gridtrain::learner
