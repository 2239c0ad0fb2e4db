// gridnode run, as named steps:
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

#include <malloc.h>
#include <unistd.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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
#include "app/listen_address.hpp"
#include "config/config.hpp"
#include "config/endpoint.hpp"
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

// Parses a host:port given on the command line; errors name the option.
Result<config::Endpoint> endpoint_option(const std::string& option, const std::string& text) {
  auto parsed = config::parse_endpoint(text);
  if (parsed) return parsed;
  Error error = parsed.error();
  error.source = option;
  return error;
}

struct RunPlan {
  config::Config config;
  std::vector<config::Endpoint> seeds;  // asked in order; none: bootstrap a new cluster
  std::string name;
};

// 1. The run's config, with the command line's overrides, checked before anything starts.
Result<RunPlan> configure(const RunArgs& args) {
  // --log-format and --log-level are overrides of their keys, checked as the keys are; an error names the option.
  std::vector<std::string> overrides = args.overrides;
  const std::pair<const char*, const std::string*> log_options[] = {{"log_format", &args.log_format},
                                                                    {"log_level", &args.log_level}};
  for (const auto& [key, value] : log_options)
    if (!value->empty()) overrides.push_back(std::string("metrics.") + key + "=" + *value);
  auto loaded = config::load_file(args.config_file, overrides);
  if (!loaded) {
    Error error = loaded.error();
    for (const auto& [key, value] : log_options)
      if (!value->empty() && error.key == std::string("metrics.") + key) {
        error.source = std::string("--") + (key == std::string("log_format") ? "log-format" : "log-level");
        error.key.clear();
      }
    return error;
  }
  RunPlan plan{std::move(loaded).value(), {}, args.name};
  if (!args.listen.empty()) {
    auto listen = endpoint_option("--listen", args.listen);
    if (!listen) return listen.error();
    plan.config.cluster.listen = listen.value();
  }
  if (!args.seed_address.empty()) {
    auto seeds = config::parse_endpoint_list(args.seed_address);
    if (!seeds) {
      Error error = seeds.error();
      error.source = "--seed";
      return error;
    }
    plan.seeds = std::move(seeds).value();
  }
  // Where the listen address came from, for an error about it: the option, an override, or the file.
  Error listen_source{.source = args.config_file, .key = "cluster.listen"};
  if (!args.listen.empty()) {
    listen_source = Error{.source = "--listen"};
  } else if (std::any_of(overrides.begin(), overrides.end(),
                         [](const std::string& o) { return o.rfind("cluster.listen=", 0) == 0; })) {
    listen_source.source = "--set";
  }
  if (Status reachable = check_listen_address(plan.config.cluster.listen, listen_source, plan.seeds); !reachable)
    return reachable.error();
  // This node's own address among the seeds: it is no member to join through (the same list on every machine, as
  // the boot scripts pass it, names each machine too). Left out; a list of nothing else is bad input, as joining
  // through ourselves only ever timed out ("the seed is not a member of a cluster", after 10 s).
  const config::Endpoint& self = plan.config.cluster.listen;
  if (self.port != 0 && !plan.seeds.empty()) {
    std::erase(plan.seeds, self);
    if (plan.seeds.empty())
      return Error{.source = "--seed", .message = self.to_string() + " is this node's own listen address: name a "
                                                                      "member to join, or leave --seed out to "
                                                                      "bootstrap a new cluster"};
  }
  if (args.shard_count < 1 || args.shard_index < 0 || args.shard_index >= args.shard_count)
    return Error{.source = "--shard-index", .message = "expected a shard in [0, --shard-count)"};
  // The name must not change across restarts, or --resume would not find the checkpoint: by default the listen
  // port, which a restart reuses. A node on port 0 (any free port) has no such name, and the nodes of a machine
  // that share one config all listen on port 0: each is named by its process id instead, so that their
  // checkpoints and their rows of a shared metrics CSV stay apart (all were "0": they overwrote each other's
  // checkpoints and their rows could not be told apart). To resume, such a node needs --name.
  if (plan.name.empty()) {
    if (plan.config.cluster.listen.port == 0 && (args.resume || args.resume_if_present))
      return Error{.source = args.resume ? "--resume" : "--resume-if-present",
                   .message = "needs --name when the listen port is 0: the default name, the process id, changes "
                              "at every start, so no checkpoint would be found"};
    plan.name = plan.config.cluster.listen.port ? std::to_string(plan.config.cluster.listen.port)
                                                : "pid-" + std::to_string(::getpid());
  }
  return plan;
}

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

// 3. The Prometheus endpoint, when metrics.listen asks for one.
Result<std::unique_ptr<telemetry::PrometheusMetrics>> start_metrics(const RunPlan& plan) {
  if (!plan.config.metrics.listen) return std::unique_ptr<telemetry::PrometheusMetrics>();
  auto metrics = telemetry::PrometheusMetrics::start(*plan.config.metrics.listen, plan.name);
  if (metrics)
    telemetry::tell("metrics",
                    fmt::format("metrics on {}:{}/metrics", plan.config.metrics.listen->host, metrics.value()->port()),
                    {{"port", metrics.value()->port()}});
  return metrics;
}

// 4. The node, listening and joining (asynchronously).
Result<actors::NodeHandle> start_node(actors::Runtime& runtime, const RunPlan& plan, Training* training) {
  actors::NodeOptions options;
  options.config = plan.config;
  options.seeds = plan.seeds;
  // Opened here, before the options that depend on it (the runtime would open it in start_node otherwise).
  auto data_plane = runtime.open_data_plane(options.config, options.listen);
  if (!data_plane) return data_plane.error();
  options.data_plane = data_plane.value();
  if (training) {
    // The node shares the learner's store (an aliasing pointer keeps the learner alive with it).
    options.store = std::shared_ptr<learner::ParameterStore>(training->learner, &training->learner->params());
    // The trainer (start_trainer) paces by the data plane's CPU clock: the same test, on the same data plane,
    // decides on both sides. (Asked before the data plane was open, this once made the LineMasters unpaced under
    // cpu_share while the trainer paced nothing: rounds ran back to back, and two nodes on 2 cores kept 0.5-0.6x
    // of their speed, BENCHMARKS.md "Overlap".)
    const config::AllreduceConfig& allreduce = plan.config.allreduce;
    options.paced_by_every_steps =
        learner::paces_rounds(allreduce.every_steps, allreduce.cpu_share, options.data_plane != nullptr);
    options.progress = training->progress;
  }
  auto node = runtime.start_node(std::move(options));
  if (node)
    telemetry::tell("listening", "listening on " + node.value().address(), {{"address", node.value().address()}});
  return node;
}

std::string cluster_name(const RunPlan& plan, const actors::NodeHandle& node) {
  if (plan.seeds.empty()) return node.address();
  std::string names;
  for (const config::Endpoint& seed : plan.seeds) names += (names.empty() ? "" : ",") + seed.to_string();
  return names;
}

// 5. Blocks until the cluster decides; the exit code when the run ends here, nullopt once welcomed.
std::optional<int> wait_for_join(const RunPlan& plan, const actors::NodeHandle& node) {
  const auto joined = node.wait_joined();
  switch (joined.result) {
    case actors::JoinResult::welcomed:
      telemetry::tell("joined", fmt::format("joined the cluster as node {:x}", node.id()),
                      {{"node", fmt::format("{:016x}", node.id())}});
      return std::nullopt;
    case actors::JoinResult::rejected:
      return fail(kRejected, "rejected by the cluster at " + cluster_name(plan, node) + ": " + joined.reason);
    case actors::JoinResult::stopped:
      if (stop_signal.load()) return kOk;
      return fail(kInternal, "the node stopped before it joined: " + joined.reason);
    case actors::JoinResult::pending:
    case actors::JoinResult::unreachable:
      break;
  }
  return fail(kInternal, "could not join " + (plan.seeds.empty() ? std::string("a new cluster")
                                                                 : "through " + cluster_name(plan, node)) +
                             ": " + joined.reason);
}

// 6. Joining a cluster that already had members, copy the model of one of them (a line peer if there is one)
// rather than average a fresh initialisation into theirs. Decided at the join, before --wait-members, so that
// the bootstrapping node copies nobody. A resumed node copies one too: its checkpoint gives back its progress
// (step, epoch, optimizer state), but the cluster's model moved on while it was down; alone (it bootstraps),
// it keeps the checkpoint's model. A failure is not fatal: the node then trains from the model it has.
void warm_start(const actors::NodeHandle& node) {
  const auto copied = node.warm_start();
  if (!copied)
    spdlog::warn("warm start skipped, training from this node's initialisation: {}", copied.error().to_string());
  else if (copied.value())
    telemetry::tell("warm_start", fmt::format("warm start: copied the model of node {:x}", *copied.value()),
                    {{"from", fmt::format("{:016x}", *copied.value())}});
}

// 7. Nodes started together (the demo) wait for each other, or the first would train alone, finish and leave
// before the last has joined. The wait is a start line, not a quorum: it ends once the cluster has N members, or
// once a member already trains. Those saw N members before this node looked; if one of them has died since,
// waiting for N again would wait for ever while the others finish without this node.
bool has_members(const Result<actors::GridView>& view, int members) {
  return view && static_cast<int>(view.value().nodes.size()) >= members;
}

// Whether the cluster has N members as the node joins (it looks before its warm start, which may take a while:
// the others may have finished and left meanwhile). No question to the cluster when no wait was asked for.
bool members_reached(const actors::NodeHandle& node, int members) {
  return members <= 0 || has_members(node.grid_view(), members);
}

// False if the node ended meanwhile. Says how many it has at once and every 10 s, so that a node waiting for more
// members than will come (a typo in N) does not look hung.
bool wait_for_members(const actors::NodeHandle& node, int members, bool reached) {
  constexpr auto kSayEvery = std::chrono::seconds(10);
  auto said = std::chrono::steady_clock::now() - kSayEvery;
  while (!reached && !stop_signal.load()) {
    const auto view = node.grid_view();
    if (has_members(view, members)) return true;
    if (view) {
      const auto& nodes = view.value().nodes;
      if (std::any_of(nodes.begin(), nodes.end(), [](const auto& n) { return n.figures.samples > 0; })) {
        spdlog::info("{} of the {} members to wait for, but the others already train: training now",
                     nodes.size(), members);
        return true;
      }
      // Said only once it is clear that this node waits (not in the pass that finds the others training).
      if (const auto now = std::chrono::steady_clock::now(); now - said >= kSayEvery) {
        spdlog::info("waiting for {} members before training (--wait-members): {} so far", members, nodes.size());
        said = now;
      }
    }
    if (node.wait_for(std::chrono::milliseconds(100))) return false;
  }
  return true;
}

std::unique_ptr<learner::Trainer> start_trainer(const RunPlan& plan, Training& training,
                                                const actors::NodeHandle& node,
                                                std::shared_ptr<dataplane::Service> data_plane,
                                                telemetry::PrometheusMetrics* prometheus) {
  learner::TrainerSetup setup;
  setup.learner = training.learner;
  setup.test = std::move(training.test);
  setup.every_steps = plan.config.allreduce.every_steps;
  setup.cpu_share = plan.config.allreduce.cpu_share;
  // Averaging runs on the data plane's thread: its CPU time is what averaging costs this node.
  if (data_plane) setup.averaging_cpu = [data_plane] { return data_plane->cpu_time(); };
  setup.rounds = [node] { return node.stats().total().rounds_done; };
  // allreduce.every_steps or cpu_share: one more round for each of the node's lines when the trainer allows one.
  setup.on_every_steps = [node] {
    for (std::uint32_t d = 0; d < actors::kDimsOffered; ++d) node.allow_rounds(d, 1);
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
  telemetry::tell("training",
                  fmt::format("training on {}: {} parameters, {} samples in this node's shard, batch {}", where,
                              l.model().parameter_count(), l.train_set().count, l.config().batch),
                  {{"backend", l.backend_name()},
                   {"note", l.backend_note()},
                   {"parameters", l.model().parameter_count()},
                   {"samples", l.train_set().count},
                   {"batch", l.config().batch}});
  auto trainer = std::make_unique<learner::Trainer>(std::move(setup));
  trainer->start();
  return trainer;
}

// After a stall, gives back to the system the memory that the stall's backlog took. A process that was stopped
// (SIGSTOP, a frozen VM) wakes to what its peers sent meanwhile: megabytes of round messages, read and dropped in
// a burst. glibc keeps what the burst freed in its per-thread arenas, so each stall raised a long-lived node's
// resident memory by up to 2.4 MB for good (a 30-minute chaos run: +5.9%, 45 MB free in the arenas against 73 MB
// in use; malloc_trim gave 20 MB back). The serve loop below runs every 100 ms, so a longer gap is a stall; the
// trim waits until the backlog is through (the Workers sit out one connection timeout after a stall).
class StallTrim {
 public:
  explicit StallTrim(std::chrono::milliseconds connection_timeout) : timeout_(connection_timeout) {}

  void tick() {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ > timeout_) trim_at_ = now + 3 * timeout_;
    last_ = now;
    if (now >= trim_at_) {
      trim_at_ = kNever;
      malloc_trim(0);
    }
  }

 private:
  static constexpr auto kNever = std::chrono::steady_clock::time_point::max();
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point trim_at_ = kNever;
};

void leave(const actors::NodeHandle& node) {
  node.stop();
  node.wait();
}

// 8. Until training is done (a training node) or a signal comes (any node); then leave the cluster cleanly.
int serve(const actors::NodeHandle& node, learner::Trainer* trainer, telemetry::PrometheusMetrics* prometheus,
          std::chrono::milliseconds connection_timeout) {
  auto scraped = std::chrono::steady_clock::now();
  StallTrim trim(connection_timeout);
  while (!node.wait_for(std::chrono::milliseconds(100))) {
    trim.tick();
    if (prometheus && std::chrono::steady_clock::now() - scraped > std::chrono::seconds(1)) {
      prometheus->update(node.stats());
      scraped = std::chrono::steady_clock::now();
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
  telemetry::configure_event_log(plan.value().config.metrics.log_format, plan.value().config.metrics.log_level);
  // Signals only set a flag; serve() turns it into a clean stop (Leave), which needs the actors.
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  // A write to a connection the peer closed is an error the node handles (EPIPE), never the end of the process.
  std::signal(SIGPIPE, SIG_IGN);

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
  auto started = start_node(runtime, plan.value(), training ? &*training : nullptr);
  if (!started) return fail(started.error());
  const actors::NodeHandle& node = started.value();
  if (auto ended = wait_for_join(plan.value(), node)) return *ended;
  const bool members_at_join = members_reached(node, args.wait_members);
  if (training) warm_start(node);
  if (!wait_for_members(node, args.wait_members, members_at_join))
    return fail(kInternal, "the node ended unexpectedly");

  std::unique_ptr<learner::Trainer> trainer;
  if (training) trainer = start_trainer(plan.value(), *training, node, runtime.data_plane(), prometheus.value().get());
  const int code = serve(node, trainer.get(), prometheus.value().get(),
                         std::chrono::milliseconds(plan.value().config.cluster.connection_timeout_ms));
  shutdown_limit.set_code(code);
  return code;
}

}  // namespace gridtrain::app
