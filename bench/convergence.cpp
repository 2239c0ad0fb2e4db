// Convergence on Fashion-MNIST (docs/design.md, "Measuring"): test accuracy of a single node after E epochs, and of
// in-process clusters of N nodes (2-D grid, each node on its 1/N shard for E epochs, so the same total number of
// samples as the single node) in three modes:
//   elastic  elastic averaging, α = 0.3, θ = 1 (the configuration)
//   off      no averaging: each node alone on its shard
//   async    plain asynchronous averaging, α = 1
//
//   bench_convergence [--epochs E] [--nodes N] [--modes single,elastic,off,async] [--set key=value]...
//                     [--cluster-set key=value]...
//
// --set applies to every mode, --cluster-set to the cluster modes only (e.g. their learning rate: N nodes that
// average closely behave like one learner with an N times larger batch, which wants a larger rate).
//
// Prints one line per epoch (single node: samples, seconds, losses, accuracy; cluster: each node's progress
// line) and a final table: each node's test accuracy per mode next to the single node's.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "actors/runtime.hpp"
#include "learner/trainer.hpp"
#include "telemetry/epoch_log.hpp"
#include "config/config.hpp"
#include "learner/dataset.hpp"
#include "learner/learner.hpp"
#include "learner/round_pacing.hpp"
#include "learner/shard.hpp"

using namespace gridtrain;

namespace {

struct NodeResult {
  double accuracy = 0;
  double tau = 0;  // steps per completed elastic update over the whole run
  std::uint64_t rounds = 0;
};

// N learners on their shards, trained at once; with `alpha` > 0 they form an in-process cluster that averages
// their stores. Each node's accuracy is taken when its own training ends (a node that finished early keeps
// averaging until the last one is done, as it would in a cluster that is not torn down).
std::vector<NodeResult> run_cluster(config::Config cfg, const std::string& mode, int nodes, double alpha,
                                    const learner::Dataset& train, const learner::Dataset& test) {
  cfg.learner.threads = 1;  // N learner threads share the cores
  std::vector<std::shared_ptr<learner::Learner>> learners;
  for (int i = 0; i < nodes; ++i) {
    learner::Shard shard{.index = static_cast<std::size_t>(i), .count = static_cast<std::size_t>(nodes),
                         .mode = config::ShardMode::node, .method = cfg.data.shard_method, .seed = cfg.learner.seed};
    auto created = learner::Learner::create(cfg.learner, learner::take_shard(train, shard));
    if (!created) {
      std::fprintf(stderr, "error: %s\n", created.error().to_string().c_str());
      std::exit(2);
    }
    // As gridnode's node tells its learner (learner.optimizer.scale_with_nodes): the cluster's size, when it averages.
    if (alpha > 0) created.value()->set_cluster_size(nodes);
    learners.push_back(std::move(created.value()));
  }
  std::unique_ptr<actors::Runtime> runtime;
  std::vector<actors::NodeHandle> handles;
  if (alpha > 0) {
    cfg.allreduce.elastic_rate = alpha;
    runtime = std::make_unique<actors::Runtime>(cfg);
    for (int i = 0; i < nodes; ++i) {
      actors::NodeOptions options;
      options.config = cfg;
      options.node_id = static_cast<std::uint64_t>(i + 1);
      options.store = std::shared_ptr<learner::ParameterStore>(learners[i], &learners[i]->params());
      options.listen = false;
      // allreduce.every_steps, as gridnode paces it. (cpu_share paces by a data plane's CPU clock: in-process nodes
      // have none, and their rounds run back to back.)
      options.paced_by_every_steps = learner::paces_rounds(cfg.allreduce.every_steps, cfg.allreduce.cpu_share, false);
      if (i > 0) options.seed_node = handles[0].actor();
      auto started = runtime->start_node(options);
      if (!started) {
        std::fprintf(stderr, "error: %s\n", started.error().to_string().c_str());
        std::exit(1);
      }
      handles.push_back(started.value());
      if (handles.back().wait_joined().result != actors::JoinResult::welcomed) {
        std::fprintf(stderr, "error: node %d did not join\n", i);
        std::exit(1);
      }
    }
  }
  // All nodes start training together, from their own initialisations (the same seed: the same model).
  std::mutex print;
  std::vector<std::unique_ptr<learner::Trainer>> trainers;
  for (int i = 0; i < nodes; ++i) {
    learner::TrainerSetup setup;
    setup.learner = learners[i];
    setup.test = test;
    if (alpha > 0) {
      setup.rounds = [h = handles[i]] { return h.stats().total().rounds_done; };
      setup.every_steps = cfg.allreduce.every_steps;
      setup.on_every_steps = [h = handles[i]] {
        h.allow_rounds(1);
      };
    }
    setup.on_epoch = [&print, i, mode](const learner::EpochReport& r) {
      std::lock_guard lock(print);
      std::printf("%s node %d: %s\n", mode.c_str(), i, telemetry::progress_line(r).c_str());
      std::fflush(stdout);
    };
    trainers.push_back(std::make_unique<learner::Trainer>(std::move(setup)));
  }
  for (auto& t : trainers) t->start();
  std::vector<NodeResult> results(nodes);
  for (int i = 0; i < nodes; ++i) {
    trainers[i]->join();
    if (const Status& trained = trainers[i]->status(); !trained) {
      std::fprintf(stderr, "error: node %d: %s\n", i, trained.error().to_string().c_str());
      std::exit(1);
    }
    results[i].accuracy = trainers[i]->final_accuracy();
  }
  for (int i = 0; i < static_cast<int>(handles.size()); ++i) {
    results[i].rounds = handles[i].stats().total().rounds_done;
    results[i].tau = results[i].rounds ? static_cast<double>(learners[i]->steps()) / results[i].rounds : 0;
  }
  for (auto& h : handles) h.stop();
  for (auto& h : handles) h.wait();
  return results;
}

}  // namespace

// The single-node line; returns its final test accuracy.
double run_single(const config::Config& cfg, const learner::Dataset& train, const learner::Dataset& test, int epochs);

int main(int argc, char** argv) {
  std::vector<std::string> overrides{"learner.kind=model"};
  std::vector<std::string> cluster_overrides;
  int epochs = 10;
  int nodes = 4;
  std::string modes = "single,elastic,off,async";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--epochs") && i + 1 < argc) {
      epochs = std::stoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--nodes") && i + 1 < argc) {
      nodes = std::stoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--modes") && i + 1 < argc) {
      modes = argv[++i];
    } else if (!std::strcmp(argv[i], "--cluster-set") && i + 1 < argc) {
      cluster_overrides.push_back(argv[++i]);
    } else if (!std::strcmp(argv[i], "--set") && i + 1 < argc) {
      overrides.push_back(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: bench_convergence [--epochs E] [--nodes N] [--modes single,elastic,off,async] "
                   "[--set key=value]... [--cluster-set key=value]...\n");
      return 2;
    }
  }
  overrides.push_back("learner.epochs=" + std::to_string(epochs));
  auto cfg = config::load_string("{}", "<bench>", overrides);
  if (!cfg) {
    std::fprintf(stderr, "error: %s\n", cfg.error().to_string().c_str());
    return 2;
  }
  auto train = learner::load_train_set(cfg.value().data);
  auto test = learner::load_test_set(cfg.value().data);
  if (!train || !test) {
    std::fprintf(stderr, "error: %s\n", (!train ? train.error() : test.error()).to_string().c_str());
    return 2;
  }
  auto wants = [&modes](const char* m) {
    return ("," + modes + ",").find(std::string(",") + m + ",") != std::string::npos;
  };
  double single = -1;
  if (wants("single")) single = run_single(cfg.value(), train.value(), test.value(), epochs);

  std::map<std::string, std::vector<NodeResult>> results;
  auto cluster_overrides_all = overrides;
  cluster_overrides_all.insert(cluster_overrides_all.end(), cluster_overrides.begin(), cluster_overrides.end());
  auto cluster_cfg = config::load_string("{}", "<bench>", cluster_overrides_all);
  if (!cluster_cfg) {
    std::fprintf(stderr, "error: %s\n", cluster_cfg.error().to_string().c_str());
    return 2;
  }
  config::Config cluster = cluster_cfg.value();
  cluster.grid.dims = 2;
  cluster.allreduce.reduce_threshold = cluster.allreduce.complete_threshold = cluster.allreduce.advance_threshold = 1;
  if (wants("elastic")) results["elastic"] = run_cluster(cluster, "elastic", nodes, 0.3, train.value(), test.value());
  if (wants("off")) results["off"] = run_cluster(cluster, "off", nodes, 0, train.value(), test.value());
  if (wants("async")) results["async"] = run_cluster(cluster, "async", nodes, 1.0, train.value(), test.value());
  if (wants("nesterov")) {
    config::Config outer = cluster;
    outer.allreduce.outer = allreduce::OuterMode::nesterov;
    results["nesterov"] = run_cluster(outer, "nesterov", nodes, 1.0, train.value(), test.value());
  }

  std::printf("\ntest accuracy after %d epochs of 60000 samples in all (cluster: %d nodes, %d epochs of 1/%d each)\n",
              epochs, nodes, epochs, nodes);
  if (single >= 0) std::printf("%-28s %.4f\n", "single node", single);
  const std::map<std::string, std::string> names{{"elastic", "elastic a=0.3 theta=1"},
                                                 {"off", "averaging off"},
                                                 {"async", "async averaging a=1"},
                                                 {"nesterov", "nesterov outer step"}};
  for (const auto& m : {"elastic", "off", "async", "nesterov"}) {
    if (!results.count(m)) continue;
    std::printf("%-28s", names.at(m).c_str());
    for (const auto& r : results[m]) std::printf(" %.4f", r.accuracy);
    if (m != std::string("off")) {
      std::printf("   tau");
      for (const auto& r : results[m]) std::printf(" %.2f", r.tau);
    }
    std::printf("\n");
  }
  return 0;
}

double run_single(const config::Config& cfg, const learner::Dataset& train, const learner::Dataset& test, int epochs) {
  auto created = learner::Learner::create(cfg.learner, train);
  if (!created) {
    std::fprintf(stderr, "error: %s\n", created.error().to_string().c_str());
    std::exit(2);
  }
  auto& l = *created.value();
  std::printf("single node, %zu parameters, batch %d, %d epochs\n", l.model().parameter_count(),
              cfg.learner.batch, epochs);
  std::printf("%6s %10s %8s %11s %10s %13s\n", "epoch", "samples", "seconds", "train_loss", "test_loss",
              "test_accuracy");
  auto start = std::chrono::steady_clock::now();
  double loss_sum = 0;
  int loss_steps = 0;
  learner::Evaluation eval;
  auto or_exit = [](const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.to_string().c_str());
    std::exit(1);
  };
  while (!l.done()) {
    auto stepped = l.step();
    if (!stepped) or_exit(stepped.error());
    loss_sum += stepped.value().loss;
    ++loss_steps;
    if (l.steps() % static_cast<std::uint64_t>(l.steps_per_epoch()) == 0) {
      auto evaluated = l.evaluate(test);
      if (!evaluated) or_exit(evaluated.error());
      eval = evaluated.value();
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("%6d %10llu %8.1f %11.4f %10.4f %13.4f\n", l.epoch(), static_cast<unsigned long long>(l.samples()),
                  seconds, loss_sum / loss_steps, eval.loss, eval.accuracy);
      std::fflush(stdout);
      loss_sum = 0;
      loss_steps = 0;
    }
  }
  std::printf("final test accuracy: %.4f\n", eval.accuracy);
  return eval.accuracy;
}
