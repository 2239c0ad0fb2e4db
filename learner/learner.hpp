#pragma once
// Learner: trains a model on one node's shard of the training set, one minibatch per step(), on the backend
// that learner.device picks (learner/backend_factory.hpp). It knows nothing of actors or of the allreduce; it
// shares only its ParameterStore, whose per-tensor locks let the allreduce fetch and elastically update the
// model while training goes on.
//
// A step, and how it meets the allreduce (which may write any tensor between or during steps):
//   1. Snapshot: copy the parameters into the backend's working copy, tensor by tensor in reverse order, each
//      under its lock. The forward and backward passes read only this copy, so they see every tensor whole
//      (never half an elastic update) without holding any lock while they compute.
//   2. Forward and backward over the minibatch, on the working copy.
//   3. Update: for each tensor in reverse order, under its lock only, apply the optimizer to the tensor's
//      CURRENT values in the store. An elastic update that landed since the snapshot is kept, not overwritten:
//      the step adds its change to whatever the tensor holds (as async EASGD does; the gradient is at most one
//      step stale).
// Steps 1 and 3 are the backend's (learner/backend.hpp), and the above is the CPU backend's way. On the CUDA
// backend the model and the optimizer state live on the device instead, and steps 1 and 3 happen there; the
// backend's mirror keeps the store in step with the device, one tensor at a time under the same locks
// (learner/cuda/cuda_backend.hpp): the store trails the device by a few steps, and an elastic update reaches the
// device a few steps after it landed, but none is lost.
//
// Minibatches: each epoch visits every sample of the shard once, in an order shuffled from (seed, epoch); the
// last minibatch of an epoch may be smaller. Where learner.data_on_device places the shard in backend memory
// (learner/data_placement.hpp), the backend gathers each minibatch there from the epoch's order, which it holds
// from the epoch's first step; else the learner gathers it here and the backend uploads it. Both give the same
// minibatches. The order depends only on the seed, the epoch and the shard, so
// progress is restored from the step count alone (restore_progress).
//
// Threads: one thread calls step(), evaluate(), synchronize(), optimizer_state() and restore_progress();
// samples(), steps() and epoch() may be read from any thread.
//
// Errors are values. A failure of the backend (a CUDA call that fails, device memory that runs out) comes back
// from the call that met it as an Error keyed learner.device, and the learner is then failed for good: every
// later call that needs the backend returns the same error (what the backend held is lost; the store keeps
// what it last received). No exception of the backend leaves the Learner.

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "base/result.hpp"
#include "learner/backend.hpp"
#include "learner/backend_factory.hpp"
#include "learner/data_placement.hpp"
#include "learner/dataset.hpp"
#include "learner/layer_stack.hpp"
#include "learner/model.hpp"
#include "learner/optimizer.hpp"
#include "learner/parameter_store.hpp"

namespace gridtrain::learner {

struct StepResult {
  double loss = 0;      // mean cross-entropy over the minibatch, before the update
  double accuracy = 0;  // fraction of the minibatch predicted right, before the update
  int batch = 0;        // samples in the minibatch
  double learning_rate = 0;
};

struct Evaluation {
  double loss = 0;  // mean cross-entropy
  double accuracy = 0;
  std::size_t count = 0;  // samples evaluated
};

class Learner {
 public:
  // Builds the model (learner.model), initialises it from learner.seed, and sets OpenBLAS's thread count to
  // learner.threads when > 0 (process-wide). `train` is this node's shard. Errors: a model whose shapes do not
  // fit, a shard that is empty or does not match the model's input or classes, device cuda without a GPU, a
  // backend that fails to set the model up (out of device memory, say).
  static Result<std::unique_ptr<Learner>> create(const config::LearnerConfig& config, Dataset train);

  Learner(const Learner&) = delete;
  Learner& operator=(const Learner&) = delete;

  // One minibatch: snapshot, forward, backward, update (see above). Errors: the backend failed, now or before.
  // LossRead::later leaves the minibatch's loss where it was computed (StepResult's loss and accuracy are then
  // NaN), so that a GPU step is queued and the next one follows without the host waiting for it; the losses
  // are summed there for take_loss_totals(), which a report reads.
  enum class LossRead { now, later };
  Result<StepResult> step(LossRead read = LossRead::now);

  // The training steps' losses since the last call, summed over their samples (evaluations' are not counted).
  // Errors: the backend failed, now or before.
  Result<LossTotals> take_loss_totals();

  // Loss and accuracy of the current parameters (one snapshot) over `data`. Errors: check(data)'s, or the
  // backend failed, now or before.
  Result<Evaluation> evaluate(const Dataset& data);

  // Whether evaluate() can take `data`: its samples fit the model's input, its labels the model's classes.
  Status check(const Dataset& data) const;

  ParameterStore& params() { return store_; }
  const ParameterStore& params() const { return store_; }
  const Model& model() const { return model_; }
  const config::LearnerConfig& config() const { return config_; }
  const Dataset& train_set() const { return train_; }
  std::string_view backend_name() const { return backend_->name(); }  // "cpu" or "cuda"
  const std::string& backend_note() const { return backend_note_; }   // device auto on the CPU: why not CUDA
  bool data_on_device() const { return data_.on_device; }                // learner.data_on_device's outcome
  const std::string& data_note() const { return data_.why; }            // where the shard is, and why
  // What sharing the model with the store has cost so far. REQUIRES: the learner's thread.
  StoreTransfers store_transfers() const { return backend_->store_transfers(); }
  // Steps recorded and replayed as CUDA graphs (with the shard on the device). REQUIRES: the learner's thread.
  Backend::StepGraphs step_graphs() const { return backend_->step_graphs(); }

  // Brings params() up to date with the model being trained (Backend::flush): a no-op on the CPU, where the
  // store is that model; on CUDA, a round trip of the mirror. Call before reading the store for an evaluation
  // of one's own. Errors: the backend failed, now or before.
  Status synchronize();

  // The optimizer's state (the velocity, in the arena's layout; empty for sgd), after handing the model being
  // trained to the host (Backend::hand_to_host): params() and this state are then the truth until the next
  // step or evaluation, which loads both back, so that what a checkpoint reads from them is the model, and what
  // a restore writes into them lands whole. Errors: the backend failed, now or before.
  // The span is valid while the learner is; REQUIRES: used on the learner's thread, before its next step.
  Result<std::span<float>> optimizer_state();

  std::uint64_t samples() const { return samples_.load(std::memory_order_relaxed); }  // trained on, in all
  std::uint64_t steps() const { return steps_.load(std::memory_order_relaxed); }
  int epoch() const { return epoch_.load(std::memory_order_relaxed); }  // epochs completed
  bool done() const { return epoch() >= config_.epochs; }               // learner.epochs completed
  int steps_per_epoch() const { return steps_per_epoch_; }
  // The cluster's size as this node sees it, for learner.optimizer.scale_with_nodes; 1 until told. Any thread.
  void set_cluster_size(int nodes) { cluster_size_.store(nodes < 1 ? 1 : nodes, std::memory_order_relaxed); }
  int cluster_size() const { return cluster_size_.load(std::memory_order_relaxed); }
  // This epoch's order of the shard's samples (indices into train_set()).
  const std::vector<std::uint32_t>& epoch_order() const { return order_; }

  // Moves the minibatch order to where it is after `steps` steps from the start (a checkpoint's step count);
  // parameters and optimizer state are the caller's to restore, after this call (which hands the model to the
  // host as optimizer_state() does, so that the next step loads what the caller wrote). Errors: the backend
  // failed, now or before (the progress is moved all the same).
  Status restore_progress(std::uint64_t steps);

 private:
  Learner(const config::LearnerConfig& config, Model model, Dataset train, BackendChoice backend);

  void start_epoch();
  // Places the shard as learner.data_on_device says, holding it in backend memory when it goes there.
  Status place_data();
  // Queues a training step on the minibatch of `batch` samples from position_: forward (the loss not yet
  // read), backward, update.
  void train_on_minibatch(int batch, double learning_rate);
  // Runs fn, which calls into the backend; an exception it throws fails the learner (failed_), and is returned.
  template <class Fn>
  Status on_backend(Fn&& fn);

  config::LearnerConfig config_;
  Model model_;
  Dataset train_;
  ParameterStore store_;
  Optimizer optimizer_;
  std::unique_ptr<Backend> backend_;
  std::string backend_note_;
  DataPlacement data_;
  LayerStack stack_;
  Status failed_;  // the backend's failure, once it failed
  LossTotals taken_;  // training losses taken from the stack before an evaluation, for take_loss_totals()

  int steps_per_epoch_ = 0;
  std::vector<std::uint32_t> order_;  // this epoch's sample order
  std::size_t position_ = 0;          // next sample in order_
  bool order_held_ = false;           // the backend holds order_ (data_.on_device)
  std::vector<float> inputs_;         // one minibatch, gathered
  std::vector<std::int32_t> labels_;

  std::atomic<std::uint64_t> samples_{0};
  std::atomic<std::uint64_t> steps_{0};
  std::atomic<int> epoch_{0};
  std::atomic<int> cluster_size_{1};
};

}  // namespace gridtrain::learner
