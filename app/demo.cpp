// gridnode demo: a local cluster of N `gridnode run` processes of this same executable on loopback, training
// the MLP 784-256-128-10 on Fashion-MNIST with elastic averaging (grid.dims 2, α = 0.3, θ = 1), each on its own
// shard, as named steps:
//   1. write_config     the config the nodes run, DIR/cluster.yaml
//   2. start_nodes      one at a time, each joining through the first once the one before has joined
//   3. relay_progress   their progress lines, prefixed "[node i]", until every node has ended (Ctrl-C stops all)
//   4. collect          DIR/node-<i>.log (each node's whole output), the merged DIR/metrics.csv, and a summary of
//                       every node's final test accuracy
//   5. plot             DIR/accuracy.png, loss.png, samples_per_s.png, tau.png (gnuplot, app/plot_command.cpp):
//                       each figure against the time since each node started
// Each node runs OpenBLAS on one thread.

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "app/child_process.hpp"
#include "app/local_capacity.hpp"
#include "app/commands.hpp"
#include "telemetry/epoch_log.hpp"

namespace gridtrain::app {

namespace {

std::atomic<int> demo_signal{0};

extern "C" void on_demo_signal(int sig) { demo_signal.store(sig); }

using Nodes = std::vector<std::unique_ptr<ChildProcess>>;

// How each node ended: its exit code and the accuracy of its "final test_accuracy" line ("" if none came).
struct Ending {
  int exit_code = -1;
  std::string final_accuracy;
};

std::string node_csv(const std::string& dir, std::size_t i) { return dir + "/node-" + std::to_string(i) + ".csv"; }

// 1.
std::string write_config(const std::string& dir, int epochs) {
  const std::string path = dir + "/cluster.yaml";
  std::ofstream(path) << "# Written by gridnode demo: the MLP 784-256-128-10 on Fashion-MNIST, elastic averaging on "
                         "a 2-D grid.\n"
                         "cluster:\n"
                         "  listen: 127.0.0.1:0\n"
                         "grid:\n"
                         "  dims: 2\n"
                         "allreduce:\n"
                         "  elastic_rate: 0.3\n"
                         "  reduce_threshold: 1\n"
                         "  complete_threshold: 1\n"
                         "  advance_threshold: 1\n"
                         "learner:\n"
                         "  kind: model\n"
                         "  device: cpu\n"
                         "  threads: 1\n"
                         "  # Nodes that average closely act like one learner with an N times larger batch: the rate "
                         "times sqrt(N)\n"
                         "  # (0.04 for 4 nodes; BENCHMARKS.md, \"Outer optimizer and rates that scale\").\n"
                         "  optimizer:\n"
                         "    learning_rate: 0.02\n"
                         "    scale_with_nodes: sqrt\n"
                         "  epochs: "
                      << epochs << "\n";
  return path;
}

// 2. Joins go one by one: each node is started once the one before has joined, and the first's address is the
// seed of the others.
Result<Nodes> start_nodes(const DemoArgs& args, const std::string& exe, const std::string& config,
                          const std::string& dir) {
  Nodes nodes;
  std::string seed;
  for (int i = 0; i < args.nodes; ++i) {
    const auto index = static_cast<std::size_t>(i);
    std::vector<std::string> argv{"run", "--config", config, "--listen", "127.0.0.1:0", "--name", std::to_string(i),
                                  "--shard-index", std::to_string(i), "--shard-count", std::to_string(args.nodes),
                                  "--wait-members", std::to_string(args.nodes),
                                  "--set", "metrics.csv=" + node_csv(dir, index)};
    if (!seed.empty()) argv.insert(argv.end(), {"--seed", seed});
    for (const auto& o : args.overrides) argv.insert(argv.end(), {"--set", o});
    auto started = ChildProcess::start(exe, argv);
    if (!started) return started.error();
    nodes.push_back(std::move(started).value());
    auto joined = nodes.back()->wait_for_line("joined the cluster", std::chrono::seconds(60));
    if (!joined)
      return Error{.source = "demo", .message = "node " + std::to_string(i) + " did not join:\n" +
                                                nodes.back()->output()};
    if (seed.empty()) {
      auto listening = nodes.back()->wait_for_line("listening on ", std::chrono::seconds(1));
      seed = listening->substr(listening->find("listening on ") + 13);
    }
    std::cout << "[node " << i << "] " << *joined << std::endl;
  }
  return nodes;
}

// 3. Returns how each node ended, and whether the demo was stopped by a signal.
std::vector<Ending> relay_progress(Nodes& nodes, bool& stopped) {
  std::vector<Ending> endings(nodes.size());
  std::vector<bool> ended(nodes.size(), false);
  stopped = false;
  for (;;) {
    bool all_ended = true;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      while (auto line = nodes[i]->next_line(std::chrono::milliseconds(0))) {
        // "training on": the CPU or a GPU, and why not a GPU.
        if (line->starts_with("training on ") || line->starts_with("epoch ") || line->starts_with("final "))
          std::cout << "[node " << i << "] " << *line << std::endl;
        if (line->starts_with("final test_accuracy ")) endings[i].final_accuracy = line->substr(20);
      }
      if (!ended[i]) {
        if (auto code = nodes[i]->wait_exit(std::chrono::milliseconds(0))) {
          endings[i].exit_code = *code;
          ended[i] = true;
        }
      }
      all_ended = all_ended && ended[i];
    }
    if (all_ended) return endings;
    if (demo_signal.load() && !stopped) {
      std::cout << "demo: stopping the nodes" << std::endl;
      for (auto& n : nodes) n->signal(SIGTERM);
      stopped = true;
    }
    ::usleep(50000);
  }
}

// 4. Whether every node finished.
bool collect(const Nodes& nodes, const std::vector<Ending>& endings, const std::string& dir) {
  bool all_finished = true;
  std::ofstream merged(dir + "/metrics.csv");
  merged << telemetry::metrics_csv_header << '\n';
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    std::ofstream(dir + "/node-" + std::to_string(i) + ".log") << nodes[i]->output();
    std::ifstream part(node_csv(dir, i));
    std::string row;
    std::getline(part, row);  // the header
    while (std::getline(part, row)) merged << row << '\n';
    const bool finished = endings[i].exit_code == 0 && !endings[i].final_accuracy.empty();
    all_finished = all_finished && finished;
    std::cout << "node " << i << ": "
              << (finished ? "final test_accuracy " + endings[i].final_accuracy
                           : "did not finish (exit " + std::to_string(endings[i].exit_code) + ")")
              << std::endl;
  }
  return all_finished;
}

// 5. A failed plot is a warning: the CSV holds the same figures.
bool plot(const std::string& dir) {
  const Status drawn = draw_metrics_plots(dir + "/metrics.csv", dir, "gridnode demo");
  if (!drawn.ok()) std::cerr << "warning: demo: no plots: " << drawn.error().to_string() << std::endl;
  return drawn.ok();
}

}  // namespace

int demo(const DemoArgs& args, const char* argv0) {
  if (args.nodes < 1 || args.epochs < 1) return fail(kBadInput, "demo: --nodes and --epochs must be at least 1");
  if (Status fits = fits_here("demo", args.nodes); !fits.ok()) return fail(kBadInput, fits.error().message);
  std::error_code ec;
  std::filesystem::create_directories(args.out, ec);
  if (ec) return fail(kBadInput, "demo: cannot create " + args.out + ": " + ec.message());
  const std::string dir = std::filesystem::absolute(args.out).string();
  const std::string config = write_config(dir, args.epochs);
  // N processes on few cores: one BLAS thread each, or they fight over the cores.
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  std::signal(SIGINT, on_demo_signal);
  std::signal(SIGTERM, on_demo_signal);

  std::cout << "demo: " << args.nodes << " nodes, " << args.epochs << " epochs each on 1/" << args.nodes
            << " of Fashion-MNIST; writing " << dir << std::endl;
  auto nodes = start_nodes(args, self_exe(argv0), config, dir);
  if (!nodes) return fail(kInternal, nodes.error().to_string());
  bool stopped = false;
  const std::vector<Ending> endings = relay_progress(nodes.value(), stopped);
  const bool finished = collect(nodes.value(), endings, dir);
  if (plot(dir))
    std::cout << "demo: wrote " << dir << "/metrics.csv, and its plots accuracy.png, loss.png, samples_per_s.png and "
              << "tau.png" << std::endl;
  else
    std::cout << "demo: wrote " << dir << "/metrics.csv (no plots: see the warning above)" << std::endl;
  return finished && !stopped ? kOk : kInternal;
}

}  // namespace gridtrain::app
