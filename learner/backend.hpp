#pragma once
// Backend: what the Learner trains on. The CPU backend (learner/cpu_backend.hpp) runs on OpenBLAS; the CUDA
// backend (learner/cuda/cuda_backend.hpp), in a module loaded at run time, on cuBLAS and cuDNN. The Learner
// drives either through this interface alone and does not know which it has.
//
// Two levels of operations:
//   - per layer: the layers, the loss and the memory they work in (learner/layer.hpp), which a LayerStack runs;
//   - per model: where the model being trained lives, and how it meets the ParameterStore, whose per-tensor
//     locks let the allreduce fetch and elastically update the model while training goes on (see
//     learner/learner.hpp). The LayerStack holds a working copy of the parameters in backend memory, and the
//     backend keeps that copy and the store together: the CPU backend snapshots the store into it before each
//     pass and applies the optimizer to the store itself; the CUDA backend trains the copy on the device and
//     mirrors it into the store.
//
// Failures. The CPU backend fails only to allocate memory (std::bad_alloc). A device can fail at any call
// (out of memory, a lost device, a kernel fault): the CUDA module then throws a std::exception, which unwinds
// the failed sequence of CUDA, cuBLAS and cuDNN calls inside it. The Learner catches every such exception where
// it calls into its backend (directly or through its LayerStack) and returns it as an Error: none leaves the
// Learner. After one, the backend's state is undefined: its only use left is to be destroyed.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "learner/layer.hpp"
#include "learner/model.hpp"

namespace gridtrain::learner {

class Optimizer;
class ParameterStore;

// What a backend has copied between the ParameterStore and its working copy since attach(), both directions:
// how often (a pass visits every tensor once, under its lock) and how many bytes. A pass is a CPU snapshot
// before a step or an evaluation, or on CUDA a load of the store or one cycle of the mirror. What it costs to
// share the model with the allreduce.
struct StoreTransfers {
  std::uint64_t passes = 0;
  std::uint64_t bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;  // "cpu", "cuda"

  // --- Per layer -------------------------------------------------------------------------------------------

  // REQUIRES: layer.spec.type is dense, relu, conv2d or maxpool (flatten is a view; the loss is make_loss's).
  virtual std::unique_ptr<Layer> make_layer(const LayerShape& layer, int max_batch) = 0;
  virtual std::unique_ptr<Loss> make_loss(int classes, int max_batch) = 0;

  // `floats` floats of backend memory, zeroed (so touched: no page faults later).
  virtual Buffer allocate(std::size_t floats) = 0;
  // Host to backend memory and back. REQUIRES: the destination holds the source's size.
  virtual void upload(std::span<const float> host, float* backend) = 0;
  virtual void download(const float* backend, std::span<float> host) = 0;

  // --- Per model: training the store's model ---------------------------------------------------------------
  // Every call below REQUIRES attach() first, and comes from one thread (the learner's).

  // Takes over the training of `store`'s model (laid out as `model` says) with `optimizer`'s rule: params and
  // grads are a LayerStack's working copy and gradients (backend memory, the arena's layout). The store and
  // optimizer.state() hold the model to start from.
  // REQUIRES: called once; store, model, optimizer, params and grads outlive the backend.
  virtual void attach(ParameterStore& store, const Model& model, Optimizer& optimizer, float* params,
                      const float* grads) = 0;

  // Before a forward pass: makes the working copy the model to train. CPU: a snapshot of the store, tensor by
  // tensor in reverse order, each under its lock, so that the pass sees every tensor whole without holding any
  // lock. CUDA: the device's model already is; after hand_to_host(), the store and optimizer.state() are
  // loaded onto the device first.
  virtual void prepare() = 0;

  // After LayerStack::backward(): one step of the optimizer on the gradients. CPU: applied to the store's
  // CURRENT values, tensor by tensor in reverse order, each under its lock alone, so that an elastic update that
  // landed since the snapshot is kept. CUDA: applied to the device's model; the store follows through the
  // mirror.
  virtual void update(double learning_rate) = 0;

  // Brings the store up to date with the model being trained: a no-op on the CPU, where the store is that
  // model; on CUDA, a round trip of the mirror (the device also receives every elastic change the store had).
  virtual void flush() = 0;

  // Makes the store and optimizer.state() the truth, for a checkpoint to read or a restore to write, until the
  // next prepare() loads them back: what is written into either then lands whole. A no-op on the CPU, where
  // they always are; on CUDA, a flush() and the velocity copied to the host.
  virtual void hand_to_host() = 0;

  virtual StoreTransfers store_transfers() const = 0;

  // --- The training set in backend memory (learner.data_on_device, learner/data_placement.hpp) ---------------

  // Free device memory in bytes; nullopt for a backend that computes in host memory (the CPU).
  virtual std::optional<std::size_t> free_bytes() = 0;
  // Keeps the training set (count samples of sample_floats floats, and their labels) in backend memory, for
  // gather(). CUDA copies it to the device; the CPU keeps a view, so `images` and `labels` must outlive the
  // backend there. REQUIRES: called at most once.
  virtual void hold_training_set(std::span<const float> images, std::span<const std::int32_t> labels,
                                 std::size_t sample_floats) = 0;
  // The epoch's order of samples, for gather(). REQUIRES: hold_training_set(); order.size() == its count.
  virtual void hold_order(std::span<const std::uint32_t> order) = 0;
  // A minibatch gathered in backend memory: inputs[n] = images[order[first + n]] and labels[n] =
  // labels[order[first + n]] for n < batch, queued like a layer's work.
  // REQUIRES: hold_order(); first + batch <= count; inputs and labels backend memory of batch samples.
  virtual void gather(std::size_t first, int batch, float* inputs, std::int32_t* labels) = 0;

  // --- A training step as one unit of work ------------------------------------------------------------------

  // Runs `work`, which queues one training step from a held training set (gather, forward, loss, backward,
  // update) with the step's `first` sample in the epoch's order and its `learning_rate`, the same values `work`
  // passes to gather() and update(). A backend may record `work` once per batch size and replay the record in
  // its place (CUDA: a CUDA graph, once the step has run a few times as it is); `work`'s host code then does
  // not run, so it must keep no host state of its own that a later call reads (the loss's batch travels with its
  // sums). The CPU backend runs `work`.
  virtual void run_step(int batch, std::size_t first, double learning_rate, const std::function<void()>& work) = 0;

  // What run_step() has done with its records (CUDA graphs): for the benchmarks, the tests and the log.
  struct StepGraphs {
    std::uint64_t captured = 0;  // records made
    std::uint64_t replayed = 0;  // steps run from a record
    std::string off;             // why records are no longer made ("" while they are, or where there are none)
  };
  virtual StepGraphs step_graphs() const { return {}; }
};

}  // namespace gridtrain::learner
