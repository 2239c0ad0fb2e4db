#include "app/run_steps.hpp"

#include <unistd.h>
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <fmt/format.h>

#include "app/listen_address.hpp"
#include "learner/trainer.hpp"
#include "telemetry/event_log.hpp"

namespace gridtrain::app {

namespace {

// Parses a host:port given on the command line; errors name the option.
Result<config::HostPort> endpoint_option(const std::string& option, const std::string& text) {
  auto parsed = config::parse_host_port(text);
  if (parsed) return parsed;
  Error error = parsed.error();
  error.source = option;
  return error;
}

std::string cluster_name(const RunPlan& plan, const actors::NodeHandle& node) {
  if (plan.seeds.empty()) return node.address();
  std::string names;
  for (const config::HostPort& seed : plan.seeds) names += (names.empty() ? "" : ",") + seed.to_string();
  return names;
}

}  // namespace

Result<RunPlan> configure(const RunArgs& args, const std::vector<std::string>& forced) {
  // --log-format and --log-level are overrides of their keys, checked as the keys are; an error names the option.
  std::vector<std::string> overrides = forced;
  overrides.insert(overrides.end(), args.overrides.begin(), args.overrides.end());
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
    auto seeds = config::parse_host_port_list(args.seed_address);
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
  const config::HostPort& self = plan.config.cluster.listen;
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

Result<std::unique_ptr<telemetry::PrometheusMetrics>> start_metrics(const RunPlan& plan) {
  if (!plan.config.metrics.listen) return std::unique_ptr<telemetry::PrometheusMetrics>();
  auto metrics = telemetry::PrometheusMetrics::start(*plan.config.metrics.listen, plan.name);
  if (metrics)
    telemetry::tell("metrics",
                    fmt::format("metrics on {}:{}/metrics", plan.config.metrics.listen->host, metrics.value()->port()),
                    {{"port", metrics.value()->port()}});
  return metrics;
}

Result<actors::NodeHandle> start_node(actors::Runtime& runtime, const RunPlan& plan, const NodeModel& model) {
  actors::NodeOptions options;
  options.config = plan.config;
  options.seeds = plan.seeds;
  // Opened here, before the options that depend on it (the runtime would open it in start_node otherwise).
  auto data_plane = runtime.shared_data_plane(options.config, options.listen);
  if (!data_plane) return data_plane.error();
  options.data_plane = data_plane.value();
  if (model.store) {
    options.store = model.store;
    // The trainer paces by the data plane's CPU clock: the same test, on the same data plane, decides on both
    // sides. (Asked before the data plane was open, this once made the LineMasters unpaced under cpu_share while
    // the trainer paced nothing: rounds ran back to back, and two nodes on 2 cores kept 0.5-0.6x of their speed,
    // BENCHMARKS.md "Overlap".)
    const config::AllreduceConfig& allreduce = plan.config.allreduce;
    options.paced_by_every_steps =
        learner::paces_rounds(allreduce.every_steps, allreduce.cpu_share, options.data_plane != nullptr);
    options.progress = model.progress;
  }
  auto node = runtime.start_node(std::move(options));
  if (node)
    telemetry::tell("listening", "listening on " + node.value().address(), {{"address", node.value().address()}});
  return node;
}

JoinVerdict wait_for_join(const RunPlan& plan, const actors::NodeHandle& node, const std::function<bool()>& stopping) {
  const auto joined = node.wait_joined();
  switch (joined.result) {
    case actors::JoinResult::welcomed:
      telemetry::tell("joined", fmt::format("joined the cluster as node {:x}", node.id()),
                      {{"node", fmt::format("{:016x}", node.id())}});
      return {};
    case actors::JoinResult::rejected:
      return {kRejected, "rejected by the cluster at " + cluster_name(plan, node) + ": " + joined.reason};
    case actors::JoinResult::stopped:
      if (stopping && stopping()) return {};
      return {kInternal, "the node stopped before it joined: " + joined.reason};
    case actors::JoinResult::pending:
    case actors::JoinResult::unreachable:
      break;
  }
  return {kInternal, "could not join " + (plan.seeds.empty() ? std::string("a new cluster")
                                                             : "through " + cluster_name(plan, node)) +
                         ": " + joined.reason};
}

// 6. Joining a cluster that already had members, copy the model of one of them (a line peer if there is one)
// rather than average a fresh initialisation into theirs. Decided at the join, before --wait-members, so that
// the bootstrapping node copies nobody. A resumed node copies one too: its checkpoint gives back its progress
// (step, epoch, optimizer state), but the cluster's model moved on while it was down; alone (it bootstraps),
// it keeps the checkpoint's model. A failure is not fatal: the node then trains from the model it has.
bool warm_start(const actors::NodeHandle& node) {
  const auto copied = node.warm_start();
  if (!copied) {
    spdlog::warn("warm start skipped, training from this node's initialisation: {}", copied.error().to_string());
    return false;
  }
  if (!copied.value()) return false;
  telemetry::tell("warm_start", fmt::format("warm start: copied the model of node {:x}", *copied.value()),
                  {{"from", fmt::format("{:016x}", *copied.value())}});
  return true;
}

// 7. Nodes started together (the demo) wait for each other, or the first would train alone, finish and leave
// before the last has joined. The wait is a start line, not a quorum: it ends once the cluster has N members, or
// once a member already trains. Those saw N members before this node looked; if one of them has died since,
// waiting for N again would wait for ever while the others finish without this node.
static bool has_members(const Result<actors::GridView>& view, int members) {
  return view && static_cast<int>(view.value().nodes.size()) >= members;
}

// Whether the cluster has N members as the node joins (it looks before its warm start, which may take a while:
// the others may have finished and left meanwhile). No question to the cluster when no wait was asked for.
bool members_reached(const actors::NodeHandle& node, int members) {
  return members <= 0 || has_members(node.grid_view(), members);
}

// False if the node ended meanwhile. Says how many it has at once and every 10 s, so that a node waiting for more
// members than will come (a typo in N) does not look hung.
bool wait_for_members(const actors::NodeHandle& node, int members, bool reached,
                      const std::function<bool()>& stopping) {
  constexpr auto kSayEvery = std::chrono::seconds(10);
  auto said = std::chrono::steady_clock::now() - kSayEvery;
  while (!reached && !(stopping && stopping())) {
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
    } else if (const auto now = std::chrono::steady_clock::now(); now - said >= kSayEvery) {
      // No view (no GridMaster answers now): said too, or a node that lost its cluster here waits in silence.
      spdlog::warn("waiting for {} members before training (--wait-members), but the node sees no cluster now: {}",
                   members, view.error().to_string());
      said = now;
    }
    if (node.wait_for(std::chrono::milliseconds(100))) return false;
  }
  return true;
}

NodeUpkeep::NodeUpkeep(const actors::NodeHandle& node, telemetry::PrometheusMetrics* prometheus,
                       std::chrono::milliseconds connection_timeout)
    : node_(node),
      prometheus_(prometheus),
      scraped_(std::chrono::steady_clock::now()),
      connection_timeout_(connection_timeout),
      last_(scraped_) {}

void NodeUpkeep::tick() {
  const auto now = std::chrono::steady_clock::now();
  if (prometheus_ && now - scraped_ > std::chrono::seconds(1)) {
    prometheus_->update(node_.stats());
    scraped_ = now;
  }
  if (now - last_ > connection_timeout_) trim_at_ = now + 3 * connection_timeout_;
  last_ = now;
  if (now >= trim_at_) {
    trim_at_ = kNever;
    malloc_trim(0);
  }
}

void leave(const actors::NodeHandle& node) {
  node.stop();
  node.wait();
}

}  // namespace gridtrain::app
