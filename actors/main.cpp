// gridnode: one binary per machine (DESIGN.md, "The command line"; a contract that scripts and tests rely on).
//
// Exit codes: 0 success, 2 bad input (config, command line, data file), 3 rejected by the cluster, 1 internal
// error. Errors go to stderr, one line each, starting with "error:".

#include <CLI/CLI.hpp>
#include <caf/io/middleman.hpp>
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "actors/demo.hpp"
#include "actors/metrics.hpp"
#include "actors/node_handle.hpp"
#include "actors/prometheus_metrics.hpp"
#include "actors/trainer.hpp"
#include "actors/warm_start.hpp"
#include "actors/status.hpp"
#include "actors/system_config.hpp"
#include "config/config.hpp"
#include "config/endpoint.hpp"
#include "learner/checkpoint.hpp"
#include "learner/dataset.hpp"
#include "learner/learner.hpp"
#include "learner/shard.hpp"

namespace {

using namespace gridtrain;

enum ExitCode : int { kOk = 0, kInternal = 1, kBadInput = 2, kRejected = 3 };

int fail(int code, const std::string& message) {
  std::cerr << "error: " << message << '\n';
  return code;
}

int fail(const config::Error& error) { return fail(kBadInput, error.to_string()); }

// -- check-config --------------------------------------------------------------------------------------------

struct CheckConfigArgs {
  std::string file;
  std::vector<std::string> overrides;
  bool print = false;
  bool schema = false;
};

int check_config(const CheckConfigArgs& args) {
  if (args.schema) {
    std::cout << config::describe_schema();
    return kOk;
  }
  if (args.file.empty()) return fail(kBadInput, "check-config: a config FILE is required (or --schema)");
  auto loaded = config::load_file(args.file, args.overrides);
  if (!loaded) return fail(loaded.error());
  if (args.print)
    std::cout << config::to_yaml(loaded.value());
  else
    std::cout << args.file << ": ok\n";
  return kOk;
}

// Parses a host:port given on the command line; errors name the option.
config::Result<config::Endpoint> endpoint_option(const std::string& option, const std::string& text) {
  auto parsed = config::parse_endpoint(text);
  if (!parsed) {
    auto error = parsed.error();
    error.source = option;
    return error;
  }
  return parsed;
}

void configure_logging(const config::MetricsConfig& metrics) {
  static constexpr spdlog::level::level_enum levels[] = {spdlog::level::trace, spdlog::level::debug,
                                                         spdlog::level::info, spdlog::level::warn,
                                                         spdlog::level::err};
  spdlog::set_level(levels[static_cast<int>(metrics.log_level)]);
  if (metrics.log_format == config::LogFormat::json)
    spdlog::set_pattern(R"({"time":"%Y-%m-%dT%H:%M:%S.%e","level":"%l","msg":"%v"})");
  else
    spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
}

// -- run -----------------------------------------------------------------------------------------------------

struct RunArgs {
  std::string config_file;
  std::string seed;
  std::string listen;
  std::vector<std::string> overrides;
  std::string name;      // stable across restarts: names the checkpoint file and the CSV rows
  int shard_index = 0;   // data.shard node: this node's shard, of shard_count
  int shard_count = 1;
  bool resume = false;
  int wait_members = 0;  // train only once the cluster has this many members (gridnode demo's start line)
};

std::atomic<int> stop_signal{0};

extern "C" void on_stop_signal(int sig) { stop_signal.store(sig); }

int run(const RunArgs& args) {
  auto loaded = config::load_file(args.config_file, args.overrides);
  if (!loaded) return fail(loaded.error());
  config::Config cfg = std::move(loaded.value());
  if (!args.listen.empty()) {
    auto listen = endpoint_option("--listen", args.listen);
    if (!listen) return fail(listen.error());
    cfg.cluster.listen = listen.value();
  }
  std::optional<config::Endpoint> seed;
  if (!args.seed.empty()) {
    auto parsed = endpoint_option("--seed", args.seed);
    if (!parsed) return fail(parsed.error());
    seed = parsed.value();
  }
  if (args.shard_count < 1 || args.shard_index < 0 || args.shard_index >= args.shard_count)
    return fail(kBadInput, "--shard-index must be in [0, --shard-count)");
  // The name must not change across restarts, or --resume would not find the checkpoint: by default the listen
  // port, which a restart reuses (with port 0 the name changes; give --name then).
  std::string name = args.name;
  if (name.empty()) name = cfg.cluster.listen.port ? std::to_string(cfg.cluster.listen.port) : "0";
  configure_logging(cfg.metrics);

  // Signals only set a flag; the loop below turns it into a clean stop (Leave), which needs the actors.
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);

  actors::SystemConfig system_config{cfg};
  caf::actor_system system{system_config};
  // learner.kind model: the learner is made before the node, which averages its store.
  std::shared_ptr<learner::Learner> trainee;
  learner::Dataset test;
  std::optional<actors::MetricsCsv> csv;
  std::string checkpoint_path;
  if (cfg.learner.kind == config::LearnerKind::model) {
    auto train = learner::load_train_set(cfg.data);
    if (!train) return fail(train.error());
    auto loaded_test = learner::load_test_set(cfg.data);
    if (!loaded_test) return fail(loaded_test.error());
    test = std::move(loaded_test.value());
    learner::Shard shard{.index = static_cast<std::size_t>(args.shard_index),
                         .count = static_cast<std::size_t>(args.shard_count),
                         .mode = cfg.data.shard,
                         .method = cfg.data.shard_method,
                         .seed = cfg.learner.seed};
    auto created = learner::Learner::create(cfg.learner, learner::take_shard(std::move(train.value()), shard));
    if (!created) return fail(created.error());
    trainee = std::move(created.value());
    if (auto ok = trainee->check(test); !ok) return fail(ok.error());
    if (!cfg.checkpoint.dir.empty()) checkpoint_path = cfg.checkpoint.dir + "/node-" + name + ".ckpt";
    if (args.resume) {
      if (checkpoint_path.empty()) return fail(kBadInput, "--resume needs checkpoint.dir");
      auto data = learner::read_checkpoint(checkpoint_path, trainee->params().signature());
      if (!data) return fail(data.error());
      actors::Trainer::restore(*trainee, data.value());
      std::cout << "resumed from " << checkpoint_path << " at step " << data.value().step << std::endl;
    }
    if (!cfg.metrics.csv.empty()) {
      auto opened = actors::MetricsCsv::open(cfg.metrics.csv, args.resume);
      if (!opened) return fail(opened.error());
      csv.emplace(std::move(opened.value()));
    }
  }

  actors::NodeOptions options;
  options.config = cfg;
  options.seed = seed;
  // The node shares the learner's store (an aliasing pointer keeps the learner alive with it).
  if (trainee) options.store = std::shared_ptr<learner::ParameterStore>(trainee, &trainee->params());
  // allreduce.every_steps = n: the trainer grants each LineMaster of this node one round per n steps.
  if (trainee && cfg.allreduce.every_steps > 0) options.round_budget = 0;
  auto progress = trainee ? std::make_shared<actors::TrainingProgress>() : nullptr;
  options.progress = progress;
  auto started = actors::start_node(system, std::move(options));
  if (!started) return fail(started.error());
  const auto& node = started.value();
  std::cout << "listening on " << node.address() << std::endl;

  auto joined = node.wait_joined();
  switch (joined.result) {
    case actors::JoinResult::welcomed:
      break;
    case actors::JoinResult::rejected:
      return fail(kRejected, "rejected by the cluster at " + (seed ? seed->to_string() : node.address()) + ": " +
                                 joined.reason);
    case actors::JoinResult::stopped:
      return stop_signal.load() ? kOk : fail(kInternal, "the node stopped before it joined: " + joined.reason);
    default:
      return fail(kInternal, "could not join " + (seed ? seed->to_string() : std::string("a new cluster")) + ": " +
                                 joined.reason);
  }
  std::cout << "joined the cluster as node " << std::hex << node.id() << std::dec << std::endl;

  // Warm start: joining a cluster that already had members, copy the model of one of them (a line peer if there
  // is one) before training, rather than average a fresh initialisation into theirs. Decided at the join, before
  // --wait-members, so that the bootstrapping node copies nobody. A resumed node keeps its checkpoint's model.
  if (trainee && !args.resume) {
    auto grid = actors::query_status(system, node.actor());
    auto peer = grid ? actors::warm_start_peer(grid.value(), node.id()) : std::nullopt;
    if (peer) {
      auto at = config::parse_endpoint(peer->address);
      auto remote = at ? system.middleman().remote_actor(at.value().host, at.value().port)
                       : caf::expected<caf::actor>(caf::sec::invalid_argument);
      auto copied = remote ? actors::fetch_model(system, *remote, trainee->params())
                           : config::Status(config::Error{.message = "cannot reach " + peer->address});
      if (copied)
        std::cout << "warm start: copied the model of node " << std::hex << peer->id << std::dec << std::endl;
      else
        spdlog::warn("warm start skipped, training from this node's initialisation: {}", copied.error().to_string());
    }
  }

  // Nodes started together (the demo) wait for each other, or the first would train alone, finish and leave
  // before the last has joined.
  while (args.wait_members > 0 && !stop_signal.load()) {
    auto grid = actors::query_status(system, node.actor());
    if (grid && static_cast<int>(grid.value().nodes.size()) >= args.wait_members) break;
    if (node.wait_for(std::chrono::milliseconds(100))) return fail(kInternal, "the node ended unexpectedly");
  }

  std::unique_ptr<actors::PrometheusMetrics> prometheus;
  if (cfg.metrics.listen) {
    auto started_metrics = actors::PrometheusMetrics::start(*cfg.metrics.listen, name);
    if (!started_metrics) {
      node.stop();
      node.wait();
      return fail(started_metrics.error());
    }
    prometheus = std::move(started_metrics.value());
    std::cout << "metrics on " << cfg.metrics.listen->host << ":" << prometheus->port() << "/metrics" << std::endl;
  }

  std::unique_ptr<actors::Trainer> trainer;
  if (trainee) {
    actors::TrainerSetup setup;
    setup.learner = trainee;
    setup.test = std::move(test);
    setup.every_steps = cfg.allreduce.every_steps;
    setup.rounds = [node] { return node.stats().total().rounds_done; };
    const auto dims = static_cast<std::uint32_t>(node.stats().dims.size());
    setup.grant_round = [node, dims] {
      for (std::uint32_t d = 0; d < dims; ++d) node.grant_rounds(d, 1);
    };
    setup.on_epoch = [&csv, &prometheus, name](const actors::EpochReport& report) {
      std::cout << actors::progress_line(report) << std::endl;
      if (csv) csv->write(name, report);
      if (prometheus) prometheus->update(report);
    };
    setup.progress = progress;
    setup.checkpoint_path = checkpoint_path;
    setup.checkpoint_every = cfg.checkpoint.every;
    trainer = std::make_unique<actors::Trainer>(std::move(setup));
    trainer->start();
  }

  auto scraped = std::chrono::steady_clock::now();
  while (!node.wait_for(std::chrono::milliseconds(100))) {
    if (prometheus && std::chrono::steady_clock::now() - scraped > std::chrono::seconds(1)) {
      prometheus->update(node.stats());
      scraped = std::chrono::steady_clock::now();
    }
    if (stop_signal.load()) {
      spdlog::info("signal {}: leaving the cluster", stop_signal.load());
      if (trainer) trainer->stop(), trainer->join();
      node.stop();
      node.wait();
      return kOk;
    }
    // A node that finished training leaves at once rather than serving rounds: the others' lines rebalance
    // without it (DESIGN.md, membership), and its final model no longer pulls theirs.
    if (trainer && trainer->done()) {
      trainer->join();
      char line[64];
      std::snprintf(line, sizeof line, "final test_accuracy %.4f", trainer->final_accuracy());
      std::cout << line << std::endl;
      node.stop();
      node.wait();
      return kOk;
    }
  }
  return fail(kInternal, "the node ended unexpectedly");
}

// -- status --------------------------------------------------------------------------------------------------

struct StatusArgs {
  std::string seed;
  bool json = false;
};

int status(const StatusArgs& args) {
  auto seed = endpoint_option("--seed", args.seed);
  if (!seed) return fail(seed.error());
  config::Config cfg;
  spdlog::set_level(spdlog::level::warn);
  actors::SystemConfig system_config{cfg};
  caf::actor_system system{system_config};
  auto grid = actors::query_status(system, seed.value());
  if (!grid) return fail(kInternal, grid.error().to_string());
  std::cout << (args.json ? actors::to_json(grid.value()) + "\n" : actors::to_table(grid.value()));
  std::cout.flush();
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  // Every allreduce chunk arrives in a fresh buffer of up to max_chunk_floats floats. glibc serves blocks over
  // 128 KiB with mmap and returns them on free, so each message would fault in new pages (slow on these
  // machines: ~10 us per 4 KiB page). Keep such blocks in the heap, and the heap from shrinking, so they are
  // reused warm.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  CLI::App app{"gridnode: one node of a gridtrain cluster (elastic, grid-structured training)", "gridnode"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "gridnode 0.1.0");

  CheckConfigArgs check_args;
  auto* check_cmd = app.add_subcommand("check-config", "Validate a cluster config; exits 0 if it is good");
  check_cmd->add_option("file", check_args.file, "The YAML config file");
  check_cmd->add_option("--set", check_args.overrides, "Override a key: --set key=value (repeatable)");
  check_cmd->add_flag("--print", check_args.print, "Print the resolved config, every key, as YAML");
  check_cmd->add_flag("--schema", check_args.schema, "Print every key with its type, default and meaning");

  RunArgs run_args;
  auto* run_cmd = app.add_subcommand("run", "Run one node; without --seed it bootstraps a new cluster");
  run_cmd->add_option("--config", run_args.config_file, "The cluster's YAML config")->required();
  run_cmd->add_option("--seed", run_args.seed, "HOST:PORT of any node of the cluster to join");
  run_cmd->add_option("--listen", run_args.listen, "HOST:PORT to listen on (overrides cluster.listen; port 0: any)");
  run_cmd->add_option("--set", run_args.overrides, "Override a config key: --set key=value (repeatable)");
  run_cmd->add_option("--name", run_args.name, "This node's name, stable across restarts (default: the listen port)");
  run_cmd->add_option("--shard-index", run_args.shard_index, "This node's shard of the training set (default 0)");
  run_cmd->add_option("--shard-count", run_args.shard_count,
                      "How many shards the training set is cut into (default 1)");
  run_cmd->add_option("--wait-members", run_args.wait_members, "Start training once the cluster has N members");
  run_cmd->add_flag("--resume", run_args.resume, "Restore model, optimizer and progress from this node's checkpoint");

  actors::DemoArgs demo_args;
  auto* demo_cmd = app.add_subcommand("demo", "Train a local cluster of N node processes on Fashion-MNIST");
  demo_cmd->add_option("--nodes", demo_args.nodes, "Node processes (default 4)");
  demo_cmd->add_option("--epochs", demo_args.epochs, "Epochs of each node over its shard");
  demo_cmd->add_option("--out", demo_args.out, "Output directory (default demo-out)");
  demo_cmd->add_option("--set", demo_args.overrides, "Override a key of the demo's config (repeatable)");

  StatusArgs status_args;
  auto* status_cmd = app.add_subcommand("status", "Print the live grid: members, coordinates, line masters");
  status_cmd->add_option("--seed", status_args.seed, "HOST:PORT of any node of the cluster")->required();
  status_cmd->add_flag("--json", status_args.json, "Print one JSON object instead of a table");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(kBadInput, std::string(e.what()) + " (see gridnode --help)");
  }

  try {
    if (check_cmd->parsed()) return check_config(check_args);
    if (run_cmd->parsed()) return run(run_args);
    if (status_cmd->parsed()) return status(status_args);
    if (demo_cmd->parsed()) return actors::demo(demo_args, argv[0]);
  } catch (const std::exception& e) {
    return fail(kInternal, e.what());
  }
  return fail(kInternal, "no command ran");
}
