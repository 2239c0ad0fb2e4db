// gridnode run, as named steps (those that do not train are app/run_steps.hpp's, shared with the Python module):
//   1. configure         the config file, --listen, --seed, --set, the node's name
//   2. prepare_training  learner.kind model: the learner on this node's shard, the test set, --resume, the CSV
//   3. start_metrics     metrics.listen: the Prometheus endpoint (before the join: a port in use is bad input,
//                        said before the cluster has seen the node)
//   4. start_node        listen, then join through the seed or bootstrap a cluster
//   5. wait_for_join     welcomed, or exit 3 (rejected) / 1 (unreachable)
//   6. warm_start        joining a running cluster: copy a member's model before training
//   7. wait_for_members  --wait-members: the demo's nodes start training together
//   8. serve             say where it trains, train beside the averaging until the epochs are done or a signal
//                        comes; then leave

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "actors/runtime.hpp"
#include "app/commands.hpp"
#include "app/run_steps.hpp"
#include "config/config.hpp"
#include "config/host_port.hpp"
#include "learner/checkpoint.hpp"
#include "learner/dataset.hpp"
#include "learner/learner.hpp"
#include "learner/shard.hpp"
#include "learner/trainer.hpp"
#include "telemetry/epoch_log.hpp"
#include "telemetry/event_log.hpp"
#include "telemetry/prometheus_metrics.hpp"

namespace gridtrain::app {

namespace {

std::atomic<int> stop_signal{0};

extern "C" void on_stop_signal(int sig) { stop_signal.store(sig); }

// What a node of learner.kind model trains with.
struct Training {
  std::shared_ptr<learner::Learner> learner;
  learner::Dataset test;
  std::string checkpoint_path;  // "" = no checkpoints
  std::optional<learner::CheckpointClaim> claim;  // held while the node runs: no other node writes checkpoint_path
  std::optional<telemetry::MetricsCsv> csv;
  std::shared_ptr<learner::TrainingProgress> progress = std::make_shared<learner::TrainingProgress>();
};

// 2. The learner on this node's shard, made before the node, which averages its store.
Result<Training> prepare_training(const RunPlan& plan, const RunArgs& args) {
  const config::Config& cfg = plan.config;
  auto train = learner::load_train_set(cfg.data);
  if (!train) return train.error();
  auto test = learner::load_test_set(cfg.data);
  if (!test) return test.error();
  const learner::Shard shard{.index = static_cast<std::size_t>(args.shard_index),
                             .count = static_cast<std::size_t>(args.shard_count),
                             .mode = cfg.data.shard,
                             .method = cfg.data.shard_method,
                             .seed = cfg.learner.seed};
  auto created = learner::Learner::create(cfg.learner, learner::take_shard(std::move(train).value(), shard));
  if (!created) return created.error();
  Training t;
  t.learner = std::move(created).value();
  t.test = std::move(test).value();
  if (Status fits = t.learner->check(t.test); !fits.ok()) return fits.error();
  if (!cfg.checkpoint.dir.empty()) {
    // The directory is made if it is missing, as a log directory would be: a node whose first checkpoint failed
    // at step `every` would have lost the steps before it.
    std::error_code made;
    std::filesystem::create_directories(cfg.checkpoint.dir, made);
    if (made)
      return Error{.source = cfg.checkpoint.dir, .key = "checkpoint.dir",
                   .message = "cannot create the directory: " + made.message()};
    t.checkpoint_path = cfg.checkpoint.dir + "/node-" + plan.name + ".ckpt";
    auto claimed = learner::CheckpointClaim::claim(t.checkpoint_path);
    if (!claimed) return claimed.error();
    t.claim.emplace(std::move(claimed).value());
  }
  bool resume = args.resume;
  if (args.resume_if_present) {
    std::error_code probe;
    resume = !t.checkpoint_path.empty() && std::filesystem::exists(t.checkpoint_path, probe);
    // A checkpoint that cannot be looked at is not "no checkpoint": starting over would overwrite it.
    if (probe)
      return Error{.source = t.checkpoint_path, .key = "--resume-if-present",
                   .message = "cannot tell whether a checkpoint is there: " + probe.message()};
    if (!resume)
      telemetry::tell("fresh_start",
                      t.checkpoint_path.empty()
                          ? std::string("no checkpoint.dir: nothing to resume, training from the start")
                          : "no checkpoint at " + t.checkpoint_path + " yet: training from the start",
                      {{"checkpoint", t.checkpoint_path}});
  }
  if (resume) {
    if (t.checkpoint_path.empty()) return Error{.source = "--resume", .message = "needs checkpoint.dir"};
    auto data = learner::read_checkpoint(t.checkpoint_path, t.learner->params().signature());
    if (!data) return data.error();
    if (Status restored = learner::Trainer::restore(*t.learner, data.value()); !restored) return restored.error();
    telemetry::tell("resumed", "resumed from " + t.checkpoint_path + " at step " + std::to_string(data.value().step),
                    {{"checkpoint", t.checkpoint_path}, {"step", data.value().step}});
  }
  if (!cfg.metrics.csv.empty()) {
    auto opened = telemetry::MetricsCsv::open(cfg.metrics.csv, resume);
    if (!opened) return opened.error();
    t.csv.emplace(std::move(opened).value());
  }
  return t;
}

// The learner's view of the cluster's size (learner.optimizer.scale_with_nodes), from the node's own GridState.
void tell_cluster_size(const actors::NodeHandle& node, learner::Learner& learner) {
  if (auto members = node.members(std::chrono::seconds(1)); members && !members.value().empty())
    learner.set_cluster_size(static_cast<int>(members.value().size()));
}

std::unique_ptr<learner::Trainer> start_trainer(const RunPlan& plan, Training& training,
                                                const actors::NodeHandle& node,
                                                std::function<std::chrono::nanoseconds()> averaging_cpu,
                                                telemetry::PrometheusMetrics* prometheus) {
  learner::TrainerSetup setup;
  setup.learner = training.learner;
  setup.test = std::move(training.test);
  setup.every_steps = plan.config.allreduce.every_steps;
  setup.cpu_share = plan.config.allreduce.cpu_share;
  // What averaging costs this node: the data plane's thread and the actors' (Runtime::averaging_cpu).
  setup.averaging_cpu = std::move(averaging_cpu);
  // Read from the data plane's counters: never a request from the training thread, which a node busy with a
  // failover would answer late (NodeHandle::stats() waits up to 10 s).
  if (const auto counters = node.data_counters()) {
    setup.rounds = [counters] { return actors::rounds_done(*counters); };
    setup.averaging = [counters] { return actors::averaging(*counters); };
  }
  setup.staleness_bound = plan.config.allreduce.staleness_bound;
  // allreduce.every_steps or cpu_share: one more round for each of the node's lines when the trainer allows one.
  setup.on_every_steps = [node] {
    node.allow_rounds(1);
  };
  setup.on_epoch = [&training, prometheus, name = plan.name](const learner::EpochReport& report) {
    telemetry::tell("epoch", telemetry::progress_line(report), telemetry::epoch_fields(report));
    if (training.csv) training.csv->write(name, report);
    if (prometheus) prometheus->update(report);
  };
  setup.progress = training.progress;
  setup.checkpoint_path = training.checkpoint_path;
  setup.checkpoint_every = plan.config.checkpoint.every;
  // Where the training runs, said as it starts: with learner.device auto, a node whose machine has no usable GPU
  // trains on the CPU, and its operator should read that and why, not guess it from the speed.
  const learner::Learner& l = *training.learner;
  std::string where(l.backend_name());
  if (!l.backend_note().empty())
    where += fmt::format(" (learner.device {}: {})", config::to_string(l.config().device), l.backend_note());
  // On a GPU, where the shard is (learner.data_on_device auto places it by its size): on the CPU it can only be
  // in host memory, which goes without saying.
  const std::string data = l.backend_name() != "cpu" || l.data_on_device() ? ", the shard " + l.data_note() : "";
  telemetry::tell("training",
                  fmt::format("training on {}: {} parameters, {} samples in this node's shard, batch {}{}", where,
                              l.model().parameter_count(), l.train_set().count, l.config().batch, data),
                  {{"backend", l.backend_name()},
                   {"note", l.backend_note()},
                   {"data", l.data_note()},
                   {"parameters", l.model().parameter_count()},
                   {"samples", l.train_set().count},
                   {"batch", l.config().batch}});
  tell_cluster_size(node, *training.learner);  // before the first step, for a scaled learning rate
  auto trainer = std::make_unique<learner::Trainer>(std::move(setup));
  trainer->start();
  return trainer;
}

// 8. Until training is done (a training node) or a signal comes (any node); then leave the cluster cleanly.
int serve(const actors::NodeHandle& node, learner::Trainer* trainer, learner::Learner* learner,
          telemetry::PrometheusMetrics* prometheus, std::chrono::milliseconds connection_timeout) {
  constexpr auto kMembersEvery = std::chrono::milliseconds(500);
  NodeUpkeep upkeep(node, prometheus, connection_timeout);
  auto members_read = std::chrono::steady_clock::now();
  while (!node.wait_for(std::chrono::milliseconds(100))) {
    upkeep.tick();
    if (learner && std::chrono::steady_clock::now() - members_read >= kMembersEvery) {
      tell_cluster_size(node, *learner);
      members_read = std::chrono::steady_clock::now();
    }
    if (stop_signal.load()) {
      spdlog::info("signal {}: leaving the cluster", stop_signal.load());
      if (trainer) trainer->stop(), trainer->join();
      leave(node);
      return kOk;
    }
    // A node that finished training leaves at once rather than serving rounds: the others' lines rebalance
    // without it, and its final model no longer pulls theirs.
    if (trainer && trainer->done()) {
      trainer->join();
      leave(node);
      if (Status trained = trainer->status(); !trained.ok()) return fail(kInternal, trained.error().to_string());
      telemetry::tell("final", fmt::format("final test_accuracy {:.4f}", trainer->final_accuracy()),
                      {{"test_accuracy", trainer->final_accuracy()}});
      return kOk;
    }
  }
  return fail(kInternal, "the node ended unexpectedly");
}

// Bounds the actor system's shutdown once the node is done. The process has left its cluster and said its result;
// what remains is ~actor_system, which waits until every actor has ended, then until every detached actor is
// destroyed. A node that became GridMaster
// by election and left 100 ms later once stayed in that wait for good: its GridMaster had asked the gate for a
// connection to a member that did not answer, and the gate's promise for that dial held both ended actors (fixed in
// the gate's on_exit; tests/actors/gate_test.cpp, and with processes in tests/app/failover_test.cpp). Anything else
// that holds an ended detached actor would hang the process the same way, and a user's process must not hang after
// its work is done: after kShutdownLimit it ends with its exit code, saying which of the two waits held it (seen
// once in about a hundred runs of that failover test since the gate's fix, without the log to tell which). The
// second wait also covers the modules' stop (the middleman's, which waits for its actor).
class ShutdownLimit {
 public:
  static constexpr std::chrono::seconds kShutdownLimit{10};
  explicit ShutdownLimit(caf::actor_system& system) : system_(system) {}
  void set_code(int code) { code_ = code; }
  // Runs before the Runtime's destructor (declared after it).
  ~ShutdownLimit() {
    const auto start = std::chrono::steady_clock::now();
    // What ~actor_system will wait for, waited for here first, so that the error can say which wait held it: an
    // actor that never ended, or (every actor ended) an ended detached actor that something still holds.
    std::size_t running = system_.registry().running();
    while (running > 0 && std::chrono::steady_clock::now() - start < kShutdownLimit / 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      running = system_.registry().running();
    }
    const std::string held =
        running > 0 ? fmt::format("{} actors had not ended after {} s", running, (kShutdownLimit / 2).count())
                    : "every actor had ended: it was held later, in the middleman's stop or a detached actor's thread";
    std::thread([code = code_, held, until = start + kShutdownLimit] {
      std::this_thread::sleep_until(until);
      spdlog::error("the actor system did not shut down within {} s ({}); ending the process (exit code {})",
                    kShutdownLimit.count(), held, code);
      std::fflush(nullptr);
      std::_Exit(code);
    }).detach();
  }

 private:
  caf::actor_system& system_;
  int code_ = kInternal;
};

}  // namespace

int run(const RunArgs& args) {
  auto plan = configure(args);
  if (!plan) return fail(plan.error());
  if (plan.value().config.learner.kind == config::LearnerKind::external)
    return fail(Error{.source = args.config_file, .key = "learner.kind",
                      .message = "external is the model of a process that hosts its node itself (the PyTorch "
                                 "front end, import gridtrain); gridnode run trains model or averages probe"});
  telemetry::configure_event_log(plan.value().config.metrics.log_format, plan.value().config.metrics.log_level);
  // Signals only set a flag; serve() turns it into a clean stop (Leave), which needs the actors.
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  // A write to a connection the peer closed is an error the node handles (EPIPE), never the end of the process.
  std::signal(SIGPIPE, SIG_IGN);
  const auto signalled = [] { return stop_signal.load() != 0; };

  std::optional<Training> training;
  if (plan.value().config.learner.kind == config::LearnerKind::model) {
    auto prepared = prepare_training(plan.value(), args);
    if (!prepared) return fail(prepared.error());
    training.emplace(std::move(prepared).value());
  }

  auto prometheus = start_metrics(plan.value());
  if (!prometheus) return fail(prometheus.error());

  actors::Runtime runtime{plan.value().config};
  ShutdownLimit shutdown_limit{runtime.system()};
  NodeModel model;
  if (training) {
    // The node shares the learner's store (an aliasing pointer keeps the learner alive with it).
    model.store = std::shared_ptr<learner::ParameterStore>(training->learner, &training->learner->params());
    model.progress = training->progress;
  }
  auto started = start_node(runtime, plan.value(), model);
  if (!started) return fail(started.error());
  const actors::NodeHandle& node = started.value();
  if (const JoinVerdict joined = wait_for_join(plan.value(), node, signalled); !joined.welcomed())
    return joined.message.empty() ? joined.code : fail(joined.code, joined.message);
  const bool members_at_join = members_reached(node, args.wait_members);
  if (training) warm_start(node);
  if (!wait_for_members(node, args.wait_members, members_at_join, signalled))
    return fail(kInternal, "the node ended unexpectedly");

  std::unique_ptr<learner::Trainer> trainer;
  if (training)
    trainer = start_trainer(plan.value(), *training, node, runtime.averaging_cpu(), prometheus.value().get());
  const int code = serve(node, trainer.get(), training ? training->learner.get() : nullptr, prometheus.value().get(),
                         std::chrono::milliseconds(plan.value().config.cluster.connection_timeout_ms));
  shutdown_limit.set_code(code);
  return code;
}

}  // namespace gridtrain::app
