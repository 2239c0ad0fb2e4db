#pragma once
// Trainer: the training thread of a node whose learner.kind is model. It steps the Learner (which shares its
// ParameterStore with the node's allreduce) until learner.epochs are done, evaluates on the test set once per
// epoch, writes checkpoints, and reports each epoch. It is a plain thread, not an actor: the learner knows
// nothing of actors, and the node's side is reached only through the callbacks below.
//
// Coupling to the allreduce: the node's LineMasters start a round only when the trainer allows one
// (`on_every_steps`, as learner/round_pacing.hpp decides), in one of two ways. allreduce.every_steps = n > 0: once every n steps, so a line runs at most
// one round per n steps of its master's learner. Else allreduce.cpu_share = f < 1: after each step in which the
// node's averaging has used no more than f of the training time (learner/cpu_share_pacer.hpp; `averaging_cpu`
// gives the averaging's CPU time). With n = 0 and f = 1 rounds run back to back and `on_every_steps` is never
// called.
//
// Bounded staleness (allreduce.staleness_bound = s > 0): the learner goes at most s steps past the last round
// completed on the node's lines; there it allows one more round (on_every_steps) and waits for one
// (learner/staleness_bound.hpp).
//
// τ (tau): learner steps per completed elastic update over the epoch, counting the rounds of every dimension
// (each completed round updates the whole model once). Infinite (printed "inf") when no round completed.
//
// When the learner fails (a step, an evaluation or taking a checkpoint's state returns an error), the trainer
// stops there: status() holds the error and done() turns true, with no final evaluation or checkpoint (the
// last checkpoint written stays). A checkpoint that cannot be written is not a failure: it is counted
// (checkpoint_failures) and training goes on.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "base/failure_streak.hpp"
#include "base/result.hpp"
#include "learner/checkpoint.hpp"
#include "learner/dataset.hpp"
#include "learner/learner.hpp"
#include "learner/round_pacing.hpp"
#include "learner/staleness_bound.hpp"
#include "learner/training_progress.hpp"

namespace gridtrain::learner {

struct EpochReport {
  int epoch = 0;             // epochs completed
  std::uint64_t samples = 0;  // trained on, in all
  double time_s = 0;          // since the trainer started
  double samples_per_s = 0;   // over this epoch's training steps (its test evaluation not counted)
  double loss = 0;            // mean training loss over this epoch's steps
  double test_loss = 0;
  double test_accuracy = 0;
  double tau = 0;             // steps per completed elastic update, over this epoch
  std::uint64_t rounds = 0;   // elastic updates completed, in all
  double waited_s = 0;        // spent waiting for a round at the staleness bound, over this epoch
};

struct TrainerSetup {
  std::shared_ptr<learner::Learner> learner;
  learner::Dataset test;  // evaluated once per epoch; one that does not fit (learner->check) fails the trainer
  int every_steps = 0;    // allreduce.every_steps
  double cpu_share = 0;   // allreduce.cpu_share: used with every_steps = 0 when in (0, 1) and averaging_cpu is set
  std::function<std::chrono::nanoseconds()> averaging_cpu;  // the node's averaging CPU time in all; may be empty
  std::function<std::uint64_t()> rounds;       // elastic updates completed so far; empty = none
  int staleness_bound = 0;                     // allreduce.staleness_bound: see above; needs rounds and averaging
  std::function<bool()> averaging;             // whether the node has a line with a peer now; empty = never
  std::function<void()> on_every_steps;        // one more round may start (see above); may be empty
  std::function<void(const EpochReport&)> on_epoch;  // called on the training thread; may be empty
  std::shared_ptr<TrainingProgress> progress;  // kept up to date for the Node's reports; may be null
  std::string checkpoint_path;  // "" = no checkpoints
  int checkpoint_every = 0;     // steps; 0 = none
};

class Trainer {
 public:
  explicit Trainer(TrainerSetup setup);
  ~Trainer();  // stop() and join()

  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  void start();
  void stop() { stop_.store(true); }  // after the current step
  void join();
  bool done() const { return done_.load(); }  // the thread has finished (all epochs, stopped, or failed)
  // Why training ended before its epochs were done (the learner failed), or ok. REQUIRES: done().
  const Status& status() const { return status_; }
  double final_accuracy() const { return final_accuracy_.load(); }
  std::uint64_t checkpoint_failures() const { return checkpoint_failures_.load(); }

  // The state a checkpoint holds, taken now from the learner. Errors: the learner's.
  // REQUIRES: called on the training thread, or while it does not run.
  static Result<learner::CheckpointData> checkpoint_data(learner::Learner& learner);
  // Restores a checkpoint's model, optimizer state and progress into a learner that has not started training.
  // Errors: the learner's.
  static Status restore(learner::Learner& learner, const learner::CheckpointData& data);

 private:
  void run();
  // Errors: the learner's (a failed write is counted and logged, not returned).
  Status write_checkpoint();
  void finish(Status status);  // status_, then done_

  TrainerSetup setup_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  std::atomic<double> final_accuracy_{0};
  std::atomic<std::uint64_t> checkpoint_failures_{0};
  FailureStreak checkpoint_streak_{std::chrono::minutes(1)};  // the training thread's: what to log of the failures
  Status status_;  // written by the thread before done_; read after it

};

}  // namespace gridtrain::learner
