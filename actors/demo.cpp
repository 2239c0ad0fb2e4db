#include "actors/demo.hpp"

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

#include "actors/child_process.hpp"
#include "actors/metrics.hpp"

namespace gridtrain::actors {

namespace {

std::atomic<int> demo_signal{0};

extern "C" void on_demo_signal(int sig) { demo_signal.store(sig); }

std::string demo_config(int epochs) {
  std::ostringstream y;
  y << "# Written by gridnode demo: the MLP 784-256-128-10 on Fashion-MNIST, elastic averaging on a 2-D grid.\n"
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
       "  # Nodes that average closely act like one learner with a larger batch: twice the one-node rate.\n"
       "  optimizer:\n"
       "    learning_rate: 0.04\n"
       "  epochs: "
    << epochs << "\n";
  return y.str();
}

// The self path: /proc/self/exe, so that the nodes run this very binary whatever the working directory.
std::string self_exe(const char* argv0) {
  std::error_code ec;
  auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(argv0) : path.string();
}

std::string plot_script(const std::string& dir, int nodes) {
  std::ostringstream g;
  g << "set terminal pngcairo size 900,560\n"
       "set output '" << dir << "/accuracy.png'\n"
       "set datafile separator ','\n"
       "set title 'gridnode demo: test accuracy per node'\n"
       "set xlabel 'time since the node started training (s)'\n"
       "set ylabel 'test accuracy'\n"
       "set key bottom right\n"
       "set grid\n"
       "plot ";
  for (int i = 0; i < nodes; ++i)
    g << (i ? ", " : "") << "'" << dir << "/node-" << i << ".csv' using 1:7 skip 1 with linespoints title 'node "
      << i << "'";
  g << "\n";
  return g.str();
}

}  // namespace

int demo(const DemoArgs& args, const char* argv0) {
  if (args.nodes < 1 || args.epochs < 1) {
    std::cerr << "error: demo: --nodes and --epochs must be at least 1\n";
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(args.out, ec);
  if (ec) {
    std::cerr << "error: demo: cannot create " << args.out << ": " << ec.message() << '\n';
    return 2;
  }
  const std::string dir = std::filesystem::absolute(args.out).string();
  const std::string config = dir + "/cluster.yaml";
  std::ofstream(config) << demo_config(args.epochs);
  // N processes on few cores: one BLAS thread each, or they fight over the cores.
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  std::signal(SIGINT, on_demo_signal);
  std::signal(SIGTERM, on_demo_signal);

  const std::string exe = self_exe(argv0);
  std::vector<std::unique_ptr<ChildProcess>> nodes;
  std::string seed;
  std::cout << "demo: " << args.nodes << " nodes, " << args.epochs << " epochs each on 1/" << args.nodes
            << " of Fashion-MNIST; writing " << dir << std::endl;
  for (int i = 0; i < args.nodes; ++i) {
    std::vector<std::string> argv{"run", "--config", config, "--listen", "127.0.0.1:0", "--name", std::to_string(i),
                                  "--shard-index", std::to_string(i), "--shard-count", std::to_string(args.nodes),
                                  "--wait-members", std::to_string(args.nodes),
                                  "--set", "metrics.csv=" + dir + "/node-" + std::to_string(i) + ".csv"};
    if (!seed.empty()) argv.insert(argv.end(), {"--seed", seed});
    for (const auto& o : args.overrides) argv.insert(argv.end(), {"--set", o});
    nodes.push_back(std::make_unique<ChildProcess>(exe, argv));
    // Wait until the node listens (the first: to learn the seed) and has joined, so that joins go one by one.
    auto joined = nodes.back()->wait_for_line("joined the cluster", std::chrono::seconds(60));
    if (!joined) {
      std::cerr << "error: demo: node " << i << " did not join:\n" << nodes.back()->output();
      return 1;
    }
    if (seed.empty()) {
      auto listening = nodes.back()->wait_for_line("listening on ", std::chrono::seconds(1));
      seed = listening->substr(listening->find("listening on ") + 13);
    }
    std::cout << "[node " << i << "] " << *joined << std::endl;
  }

  // Relay progress until every node has ended.
  std::vector<std::optional<int>> exits(nodes.size());
  std::vector<std::string> finals(nodes.size());
  bool stopping = false;
  for (;;) {
    bool all_done = true;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      while (auto line = nodes[i]->next_line(std::chrono::milliseconds(0))) {
        if (line->starts_with("epoch ") || line->starts_with("final "))
          std::cout << "[node " << i << "] " << *line << std::endl;
        if (line->starts_with("final test_accuracy ")) finals[i] = line->substr(20);
      }
      if (!exits[i]) exits[i] = nodes[i]->wait_exit(std::chrono::milliseconds(0));
      all_done = all_done && exits[i].has_value();
    }
    if (all_done) break;
    if (demo_signal.load() && !stopping) {
      std::cout << "demo: stopping the nodes" << std::endl;
      for (auto& n : nodes) n->signal(SIGTERM);
      stopping = true;
    }
    ::usleep(50000);
  }

  bool ok = !stopping;
  std::ofstream merged(dir + "/metrics.csv");
  merged << metrics_csv_header << '\n';
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    std::ofstream(dir + "/node-" + std::to_string(i) + ".log") << nodes[i]->output();
    std::ifstream part(dir + "/node-" + std::to_string(i) + ".csv");
    std::string row;
    std::getline(part, row);  // the header
    while (std::getline(part, row)) merged << row << '\n';
    bool finished = *exits[i] == 0 && !finals[i].empty();
    ok = ok && finished;
    std::cout << "node " << i << ": " << (finished ? "final test_accuracy " + finals[i]
                                                   : "did not finish (exit " + std::to_string(*exits[i]) + ")")
              << std::endl;
  }
  merged.close();
  std::ofstream(dir + "/accuracy.gp") << plot_script(dir, args.nodes);
  auto plotted = run_command("/usr/bin/env", {"gnuplot", dir + "/accuracy.gp"}, std::chrono::seconds(60));
  if (plotted.exit_code != 0)
    std::cerr << "warning: demo: gnuplot failed (exit " << plotted.exit_code << "): " << plotted.output;
  std::cout << "demo: wrote " << dir << "/metrics.csv and " << dir << "/accuracy.png" << std::endl;
  return ok ? 0 : 1;
}

}  // namespace gridtrain::actors
