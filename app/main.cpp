// gridnode: one binary per machine. This file is the command line (CLI11); each command lives in its own file
// (app/commands.hpp).
//
// Exit codes: 0 success, 2 bad input (config, command line, data file), 3 rejected by the cluster, 1 internal
// error. Errors go to stderr, one line each, starting with "error:".

#include <CLI/CLI.hpp>
#include <malloc.h>

#include <exception>
#include <string>

#include "app/commands.hpp"

using namespace gridtrain;

namespace {

// gridnode run: one node; its options fill `args`.
CLI::App* add_run(CLI::App& cli, app::RunArgs& args) {
  auto* run_cmd = cli.add_subcommand("run", "Run one node; without --seed it bootstraps a new cluster");
  run_cmd->add_option("--config", args.config_file, "The cluster's YAML config")->required();
  run_cmd->add_option("--seed", args.seed_address,
                      "HOST:PORT of any node of the cluster to join, or a list a:1,b:2,... tried in order");
  run_cmd->add_option("--listen", args.listen, "HOST:PORT to listen on (overrides cluster.listen; port 0: any)");
  run_cmd->add_option("--set", args.overrides, "Override a config key: --set key=value (repeatable)");
  run_cmd->add_option("--name", args.name,
                      "This node's name, stable across restarts (default: the listen port; with port 0, pid-PID)");
  run_cmd->add_option("--shard-index", args.shard_index, "This node's shard of the training set (default 0)");
  run_cmd->add_option("--shard-count", args.shard_count,
                      "How many shards the training set is cut into (default 1)");
  run_cmd->add_option("--wait-members", args.wait_members,
                      "Start training once the cluster has N members, or at once if its members already train");
  auto* resume_flag = run_cmd->add_flag("--resume", args.resume,
                                        "Restore model, optimizer and progress from this node's checkpoint");
  run_cmd
      ->add_flag("--resume-if-present", args.resume_if_present,
                 "As --resume where this node's checkpoint exists; without one, train from the start")
      ->excludes(resume_flag);
  run_cmd->add_option("--log-format", args.log_format,
                      "text (for people) or json (one object per line, for machines); overrides metrics.log_format");
  run_cmd->add_option("--log-level", args.log_level,
                      "trace, debug, info, warn or error: the least severe logged; overrides metrics.log_level");
  return run_cmd;
}

// gridnode chaos: a local cluster under faults.
CLI::App* add_chaos(CLI::App& cli, app::ChaosArgs& args) {
  auto* chaos_cmd =
      cli.add_subcommand("chaos", "Train a local cluster while killing, stopping and restarting random nodes");
  chaos_cmd->add_option("--nodes", args.nodes, "Node processes (default 6)");
  chaos_cmd->add_option("--minutes", args.minutes, "How long to run (default 30)");
  chaos_cmd->add_option("--every", args.every, "Seconds between two faults (default 20)");
  chaos_cmd->add_option("--stop-seconds", args.stop_seconds, "How long a stopped node stays stopped (default 8)");
  chaos_cmd->add_option("--faults", args.faults, "Stop after this many faults (default: when time is up)");
  chaos_cmd->add_flag("--target-grid-master", args.target_grid_master,
                      "Every fault hits the node that hosts the GridMaster");
  chaos_cmd->add_flag("--kills-only", args.kills_only, "Every fault is a kill -9");
  chaos_cmd->add_flag("--partitions", args.partitions,
                      "Run the nodes in network namespaces (root), and make every other fault a cut of the network: "
                      "one node from the rest, a minority from a majority, two halves, in turn");
  chaos_cmd->add_option("--cut-seconds", args.cut_seconds, "How long a cut lasts before it heals (default 10)");
  chaos_cmd->add_option("--random-seed", args.random_seed, "Seed of the fault schedule (default 1)");
  chaos_cmd->add_option("--out", args.out, "Output directory (default chaos-out)");
  chaos_cmd->add_option("--set", args.overrides, "Override a config key on every node (repeatable)");
  return chaos_cmd;
}

// gridnode status: the live grid, asked of a member.
CLI::App* add_status(CLI::App& cli, app::StatusArgs& args) {
  auto* status_cmd = cli.add_subcommand("status", "Print the live grid: members, coordinates, line masters");
  status_cmd->add_option("--seed", args.seed_address, "HOST:PORT of any node of the cluster, or a list a:1,b:2")
      ->required();
  status_cmd->add_flag("--json", args.json, "Print one JSON object instead of a table");
  status_cmd->add_option("--config", args.config_file,
                         "A node's config: use the token and TLS files its cluster section names");
  status_cmd->add_option("--token-file", args.token_file,
                         "File that holds the cluster token (as cluster.token_file); the node's gate asks for it");
  status_cmd->add_option("--tls-certificate", args.tls_certificate,
                         "A cluster with TLS: a PEM certificate its CA signed (as cluster.tls_certificate)");
  status_cmd->add_option("--tls-key", args.tls_key, "The key of --tls-certificate (as cluster.tls_key)");
  status_cmd->add_option("--tls-ca", args.tls_ca, "The cluster CA's PEM certificate (as cluster.tls_ca)");
  return status_cmd;
}

}  // namespace

int main(int argc, char** argv) {
  // Every allreduce chunk arrives in a fresh buffer of up to max_chunk_floats floats. glibc serves blocks over
  // 128 KiB with mmap and returns them on free, so each message would fault in new pages (slow on these
  // machines: ~10 us per 4 KiB page). Keep such blocks in the heap, and the heap from shrinking, so they are
  // reused warm.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  CLI::App cli{"gridnode: one node of a gridtrain cluster (elastic, grid-structured training)", "gridnode"};
  cli.require_subcommand(1);
  cli.set_version_flag("--version", "gridnode 0.1.0");

  app::CheckConfigArgs check_args;
  auto* check_cmd = cli.add_subcommand("check-config", "Validate a cluster config; exits 0 if it is good");
  check_cmd->add_option("file", check_args.file, "The YAML config file");
  check_cmd->add_option("--set", check_args.overrides, "Override a key: --set key=value (repeatable)");
  check_cmd->add_flag("--print", check_args.print, "Print the resolved config, every key, as YAML");
  check_cmd->add_flag("--schema", check_args.schema, "Print every key with its type, default and meaning");

  app::RunArgs run_args;
  auto* run_cmd = add_run(cli, run_args);

  app::DemoArgs demo_args;
  auto* demo_cmd = cli.add_subcommand("demo", "Train a local cluster of N node processes on Fashion-MNIST");
  demo_cmd->add_option("--nodes", demo_args.nodes, "Node processes (default 4)");
  demo_cmd->add_option("--epochs", demo_args.epochs, "Epochs of each node over its shard");
  demo_cmd->add_option("--out", demo_args.out, "Output directory (default demo-out)");
  demo_cmd->add_option("--set", demo_args.overrides, "Override a key of the demo's config (repeatable)");

  app::ChaosArgs chaos_args;
  auto* chaos_cmd = add_chaos(cli, chaos_args);

  app::StatusArgs status_args;
  auto* status_cmd = add_status(cli, status_args);

  app::PlotArgs plot_args;
  auto* plot_cmd = cli.add_subcommand(
      "plot", "Draw test accuracy, loss, samples/s and tau against time, one curve per node, from a metrics CSV");
  plot_cmd->add_option("csv", plot_args.csv, "The metrics CSV (metrics.csv; several nodes' rows may be in it)")
      ->required();
  plot_cmd->add_option("--out", plot_args.out, "The folder for accuracy.png, loss.png, samples_per_s.png, tau.png "
                                               "(default plots)");

  // CLI11 reports through exceptions: caught here, at its boundary.
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end the parse as "errors" with exit code 0: CLI11 prints them.
    if (e.get_exit_code() == 0) return cli.exit(e);
    return app::fail(app::kBadInput, std::string(e.what()) + " (see gridnode --help)");
  }

  try {
    if (check_cmd->parsed()) return app::check_config(check_args);
    if (run_cmd->parsed()) return app::run(run_args);
    if (status_cmd->parsed()) return app::status(status_args);
    if (demo_cmd->parsed()) return app::demo(demo_args, argv[0]);
    if (chaos_cmd->parsed()) return app::chaos(chaos_args, argv[0]);
    if (plot_cmd->parsed()) return app::plot(plot_args);
  } catch (const std::exception& e) {
    // Our code returns errors as values; this is for what a library may throw (std::bad_alloc, CAF).
    return app::fail(app::kInternal, e.what());
  }
  return app::fail(app::kInternal, "no command ran");
}
