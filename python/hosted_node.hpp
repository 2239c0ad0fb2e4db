#pragma once
// HostedNode: a gridtrain node inside a process that trains its own model: the Python module's node
// (gridtrain.Node). It takes the steps of `gridnode run` (app/run_steps.hpp: the same config and --set keys, gate,
// token, TLS, failover, status, metrics and logs), with one difference: the model is not a learner of ours but a
// ParameterStore in deferred mode whose arena the host's framework trains in place (PyTorch's parameters are views
// of it; learner/parameter_store.hpp, "deferred"). The host applies the rounds' pending pulls between its optimizer's
// steps and tells the node of each step, which paces the rounds as the Trainer does (learner/round_pacing.hpp).
//
//   HostedNode node(args);                       // config, metrics endpoint, actor system: nothing joined yet
//   auto store = node.make_model(tensors);       // the model's names and shapes; the host fills the arena
//   node.join();                                 // join or bootstrap, warm start
//   node.wait_for_members();                     // the start line (--wait-members)
//   for (...) { /* optimizer step */ store->apply_deferred(); node.step(batch); }
//   node.close();                                // leave cleanly
//
// No Python here: the binding (python/module.cpp) turns a Failure into a Python exception and releases the GIL
// around every call that may block. Thread-safe where it says so; otherwise one thread (the host's) calls it.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actors/runtime.hpp"
#include "app/commands.hpp"
#include "app/run_steps.hpp"
#include "learner/parameter_store.hpp"
#include "learner/round_pacing.hpp"
#include "learner/staleness_bound.hpp"
#include "learner/training_progress.hpp"
#include "telemetry/epoch_log.hpp"
#include "telemetry/prometheus_metrics.hpp"

namespace gridtrain::python {

// What went wrong, as gridnode would end with it: the exit code (app::ExitCode: 2 bad input, 3 rejected by the
// cluster, 1 anything else) and the text of its `error:` line. Thrown, for the binding to raise: pybind11's boundary
// speaks exceptions.
class Failure : public std::runtime_error {
 public:
  Failure(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// What one epoch's report gives that the node cannot know by itself.
struct EpochFigures {
  int epoch = 0;
  double loss = 0;
  double test_loss = 0;
  double test_accuracy = -1;  // < 0: not evaluated
};

// The actor system, made and destroyed on a thread of its own: CAF 0.17's ~actor_system never returned when run on
// another thread than the one that made it (it waited for ever on its detached actors' count), and the host may
// close its node from any thread (Python's garbage collector, atexit).
class RuntimeThread {
 public:
  // Throws Failure (1) if the actor system does not start.
  explicit RuntimeThread(const config::Config& config);
  ~RuntimeThread();  // stop()
  RuntimeThread(const RuntimeThread&) = delete;
  RuntimeThread& operator=(const RuntimeThread&) = delete;

  // REQUIRES: before stop().
  actors::Runtime& runtime() { return *runtime_; }
  // Destroys the actor system on its thread, waiting 10 s at most (then it is left to end in the background, said
  // in an error line). Idempotent.
  void stop();

 private:
  actors::Runtime* runtime_ = nullptr;
  std::promise<void> release_;
  std::promise<void> done_;
  std::thread thread_;
};

class HostedNode {
 public:
  // The node's plan as `gridnode run` makes it from `args` (its config file, --listen, --seed, --set, --name,
  // --wait-members, --log-format and --log-level; learner.kind is external whatever the file says: the host's model
  // is the model), the event log, the Prometheus endpoint and the actor system. Throws Failure (2) on bad input.
  explicit HostedNode(const app::RunArgs& args);
  ~HostedNode();  // close()
  HostedNode(const HostedNode&) = delete;
  HostedNode& operator=(const HostedNode&) = delete;

  const app::RunPlan& plan() const { return plan_; }
  std::uint16_t metrics_port() const { return prometheus_ ? prometheus_->port() : 0; }

  // The model: a deferred store of `tensors` (its signature is the model's, which the cluster compares), zeros
  // until the host writes its initial values into the arena. Throws Failure (2): called twice, no tensors, or an
  // extent below 1.
  std::shared_ptr<learner::ParameterStore> make_model(std::vector<learner::TensorSpec> tensors);

  // Starts the node and blocks until it is in: joined through a seed (then its arena holds a member's model: warm
  // start, as a pending update that the host's next apply makes the model) or bootstrapped. Throws Failure: 3 rejected (another model, protocol or token), 1 could not join (no
  // seed answered as a member within the join timeout), or 1 stopped meanwhile: `interrupted`, asked every 100 ms
  // while it waits, said so (the binding's check for Ctrl-C), or close() came from another thread.
  // REQUIRES: make_model() first; called once.
  void join(const std::function<bool()>& interrupted = {});

  // The start line (--wait-members): blocks until the cluster has that many members or one of them trains already,
  // asking `interrupted` every 100 ms. Throws Failure (1) if the node ended, or was stopped or interrupted meanwhile.
  // REQUIRES: joined().
  void wait_for_members(const std::function<bool()>& interrupted = {});

  bool joined() const { return handle().has_value(); }
  // Whether the join copied a member's model (a warm start): a checkpoint's outer-step state is then not restored.
  bool warm_started() const { return warm_started_; }
  std::uint64_t id() const;          // 0 before join()
  std::string address() const;       // "" before join()

  // The host's optimizer took one more step over `samples` samples: counts them for the node's reports and
  // allows the lines one more round when the pacing says so (true then). With allreduce.staleness_bound set, a
  // step that reaches it waits for a round (learner/staleness_bound.hpp), the GIL released. Throws Failure (1) once the node has
  // ended without close() (it was stopped from outside, or failed), so that a training loop does not run on alone
  // believing it averages. REQUIRES: joined().
  bool step(std::uint64_t samples);

  // One epoch's figures: the `epoch` event (its progress line or JSON fields), the metrics CSV row
  // (metrics.csv), the Prometheus gauges and the test accuracy of the node's reports (gridnode status). The node
  // adds samples, samples/s, τ and rounds since the last report (read from the data plane's counters). Never waits on
  // the cluster. REQUIRES: joined().
  learner::EpochReport report_epoch(const EpochFigures& figures);

  // This node's place among the cluster's members, ordered by id, and their number: for a host that cuts its data
  // into one shard per member, again each epoch, so that the members cover all of it as they come and go. As the
  // node last heard (its GridState, read every 500 ms in the background): never waits, also not while the cluster
  // elects a GridMaster. Throws Failure (1) when this node is not among them (not joined, or not in a cluster now).
  std::pair<std::size_t, std::size_t> data_shard() const;

  // The node's counters (NodeHandle::stats()); zeros before join().
  actors::NodeStats stats() const;
  // The live grid as `gridnode status --json` prints it. Throws Failure (1) when the node is not in a cluster now.
  std::string grid_json() const;

  // Leaves the cluster cleanly and ends the node's threads and its actor system (idempotent; any thread). The
  // store (and the model's views of it) stays valid for whoever holds it.
  void close();

 private:
  // step() under close_mutex_: the counts and the pacing's allowance.
  bool count_step(std::uint64_t samples);
  void upkeep_loop(const actors::NodeHandle& node);
  // Reads the node's members into the cache (the upkeep's thread, and join()); the upkeep reads its rounds.
  void refresh(const actors::NodeHandle& node);
  // The node, once joined and until closed (a copy: close() may end it on another thread meanwhile).
  std::optional<actors::NodeHandle> handle() const;

  app::RunPlan plan_;
  std::unique_ptr<telemetry::PrometheusMetrics> prometheus_;
  std::optional<telemetry::MetricsCsv> csv_;
  std::optional<RuntimeThread> runtime_;
  std::shared_ptr<learner::ParameterStore> store_;
  std::shared_ptr<learner::TrainingProgress> progress_ = std::make_shared<learner::TrainingProgress>();
  mutable std::mutex node_mutex_;
  std::optional<actors::NodeHandle> node_;  // under node_mutex_
  int wait_members_ = 0;
  bool members_at_join_ = true;  // the cluster had wait_members_ members as this node joined
  std::optional<learner::RoundPacing> pacing_;
  std::optional<learner::StalenessBound> staleness_;  // the host's thread only, as the steps

  // The host's steps, and the last epoch report's marks (the host's thread only).
  using Clock = std::chrono::steady_clock;
  std::uint64_t steps_ = 0;
  Clock::time_point last_step_;
  Clock::time_point joined_at_;
  bool warm_started_ = false;
  struct Marks {
    bool training = false;             // a step came since the last report
    Clock::time_point at;              // the first step since the last report
    std::uint64_t trained_samples = 0;  // samples trained on by then
    std::uint64_t steps = 0;           // at the last report
    std::uint64_t rounds = 0;
    std::chrono::nanoseconds waited{0};  // at the staleness bound, since the last report
  } epoch_marks_;

  mutable std::mutex cache_mutex_;
  std::vector<std::uint64_t> members_;  // under cache_mutex_: the node's members, ascending

  std::atomic<bool> closing_{false};
  std::atomic<bool> ended_{false};  // the node ended before close()
  std::mutex close_mutex_;  // held by close() and step(): the pacing and the node are not taken from under a step
  std::thread upkeep_;  // NodeUpkeep's ticks, and the watch for an end nobody asked for
};

}  // namespace gridtrain::python
