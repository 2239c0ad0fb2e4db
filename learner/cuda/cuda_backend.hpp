#pragma once
// The CUDA backend: the learner's Backend (learner/backend.hpp) on a GPU, and the way the rest of the learner
// reaches it. Its layers run on the device: dense through cuBLAS, conv2d and maxpool through cuDNN, relu, the
// loss, the biases and the optimizer as kernels of its own. It keeps the parameters and the optimizer state on
// the device, in FP32 whatever learner.precision says: the precision is the arithmetic of the products (dense and
// conv2d), set explicitly in cuBLAS's compute type and cuDNN's math type (learner/cuda/cuda_context.hpp).
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
//
// Handing the model to the host (hand_to_host, for a checkpoint or a restore): a flush, then the velocity
// copied down; from then on the store and the host's velocity are the truth, and the next prepare() loads both
// onto the device, taking whatever was written into them whole.
//
// A step as one CUDA graph (run_step, with the training set on the device): the gather, every layer forward and
// back, the loss and the optimizer, queued by the Learner as one unit. Each batch size runs 3 steps as it is
// (cuDNN's algorithms are timed and its workspace grown then, which a capture cannot do), then the 4th is
// captured on the compute stream (thread-local mode: the mirror's thread goes on) and every later step replays
// it. What changes from step to step, the first sample in the epoch's order and the learning rate, is read by
// the kernels from device memory that a one-thread kernel sets before the replay; the loss's sums carry their
// batch and are copied down by the graph, with an external event record that the host waits on. The mirror's
// publish stays outside (it depends on the mirror thread's state). A record is dropped and made again when the
// cuDNN workspace it captured grows (an evaluation's last batch may grow it); a capture that fails turns the
// records off for the backend, which then runs every step as it is, and says why (step_graphs()).
//
// Failures: the module's code checks every CUDA, cuBLAS and cuDNN call and throws on a failure
// (learner/cuda/cuda_error.hpp), which unwinds the sequence of calls under way; what crosses the Backend
// interface is a std::exception, which the Learner turns into an Error (learner/backend.hpp). Errors of the
// mirror's thread are kept and thrown by the learner's next update() or flush().

#include <cstddef>

#include "config/enums.hpp"
#include "learner/backend.hpp"

namespace gridtrain::learner {

// The module's one entry point. Makes the backend on the first CUDA device, or returns null and writes why
// (e.g. "no CUDA device: ...") into `error`. `abi` must be cuda_backend_abi: a module built from other headers
// (another Backend interface) refuses to run.
// `options` comes last, so that a module of an older interface, which takes fewer arguments, still reads `abi`
// and `error` where they are, and refuses.
inline constexpr int cuda_backend_abi = 3;
inline constexpr const char* cuda_backend_entry = "gridtrain_cuda_create";
struct CudaBackendOptions {
  config::Precision precision = config::Precision::fp32;
};
using CudaBackendCreate = Backend* (*)(int abi, char* error, std::size_t error_size, const CudaBackendOptions* options);

}  // namespace gridtrain::learner
