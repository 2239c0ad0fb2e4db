// N nodes in one process sharing one GPU train the Fashion-MNIST CNN (bench/cuda_cnn_setup.hpp), each on its
// own shard, with elastic averaging among all of them (a grid of one line): test accuracy per node at the end.
//
//   bench_cuda_cluster [--nodes 4] [--epochs 15] [--every 1] [--alpha 0.3] [--data DIR] [--device cuda] ...
//
// Each node is a Learner on a thread of its own. The averaging stands in for the data plane's rounds: a thread
// that, once every node has taken `every` more steps, fetches each node's store (tensor by tensor under its
// locks), takes the mean, and applies the elastic update to each store as a round does
// (allreduce/elastic_update.hpp), through the same calls on the store. What it leaves out is the network:
// quorums, chunks, CAF.
// TODO(actors): once gridnode runs a cluster in one process, add the same run through the actors (dims 2,
// 4 nodes on loopback) to scripts/gpu-check.sh, and compare its accuracies with these.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "bench/cuda_cnn_setup.hpp"
#include "learner/learner.hpp"
#include "learner/shard.hpp"

using namespace gridtrain;

namespace {

int fail(const Error& e) {
  std::fprintf(stderr, "error: %s\n", e.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bench::CnnOptions o = bench::parse(argc, argv);
  const learner::Dataset train = bench::load(o.data, true);
  const learner::Dataset test = bench::load(o.data, false);
  const int n = o.nodes;

  std::vector<std::unique_ptr<learner::Learner>> nodes;
  for (int i = 0; i < n; ++i) {
    const learner::Shard shard{.index = static_cast<std::size_t>(i), .count = static_cast<std::size_t>(n)};
    auto created = learner::Learner::create(bench::cnn_learner(o), learner::take_shard(train, shard));
    if (!created.ok()) {
      std::fprintf(stderr, "error: %s\n", created.error().to_string().c_str());
      return 2;
    }
    nodes.push_back(std::move(created).value());
  }
  std::printf("%d nodes on %s, %zu samples each, batch %d, %d epochs, alpha %g, a round per %d steps of each\n", n,
              std::string(nodes[0]->backend_name()).c_str(), nodes[0]->train_set().count, o.batch, o.epochs, o.alpha,
              o.every);

  const auto start = std::chrono::steady_clock::now();
  std::atomic<int> running{n};
  std::vector<Status> failed(n);  // each node's thread writes its own, read after the join
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i, l = nodes[i].get()] {
      while (!l->done()) {
        auto stepped = l->step();
        if (!stepped) {
          failed[i] = stepped.error();
          break;
        }
      }
      --running;
    });

  // Elastic averaging among all nodes, rounds back to back once every node has moved on.
  const std::size_t floats = nodes[0]->params().size();
  std::vector<std::vector<float>> fetched(n, std::vector<float>(floats));
  std::vector<float> mean(floats);
  std::uint64_t rounds = 0, last = 0;
  while (running.load() > 0) {
    std::uint64_t least = ~0ull;
    for (auto& node : nodes) least = std::min<std::uint64_t>(least, node->steps());
    if (least < last + static_cast<std::uint64_t>(o.every)) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      continue;
    }
    last = least;
    for (int i = 0; i < n; ++i) nodes[i]->params().fetch(fetched[i]);
    std::fill(mean.begin(), mean.end(), 0.0f);
    for (int i = 0; i < n; ++i)
      for (std::size_t j = 0; j < floats; ++j) mean[j] += fetched[i][j] / n;
    // As a line runner applies a round (allreduce/elastic_update.hpp): m <- m + α·(mean - fetched), which keeps
    // the steps a node took since its fetch.
    const float alpha = static_cast<float>(o.alpha);
    for (int i = 0; i < n; ++i)
      nodes[i]->params().update_each([&](std::size_t offset, std::span<float> t) {
        for (std::size_t j = 0; j < t.size(); ++j) t[j] += alpha * (mean[offset + j] - fetched[i][offset + j]);
      });
    ++rounds;
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i)
    if (!failed[i]) return fail(failed[i].error());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::uint64_t steps = 0, samples = 0;
  for (auto& node : nodes) {
    steps += node->steps();
    samples += node->samples();
  }
  std::printf("%llu averaging rounds in %.1f s; tau = %.1f steps of a node per round; %.0f samples/s in all\n",
              static_cast<unsigned long long>(rounds), seconds, rounds ? static_cast<double>(steps) / n / rounds : 0.0,
              samples / seconds);
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    if (Status synced = nodes[i]->synchronize(); !synced) return fail(synced.error());
    auto evaluated = nodes[i]->evaluate(test);
    if (!evaluated) return fail(evaluated.error());
    const double accuracy = evaluated.value().accuracy;
    sum += accuracy;
    std::printf("node %d: test accuracy %.4f\n", i, accuracy);
  }
  std::printf("cluster of %d: mean test accuracy %.4f\n", n, sum / n);
  return 0;
}
