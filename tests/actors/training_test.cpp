// Training beside averaging, in-process: Trainers on Learners whose stores a cluster of Nodes averages.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "actors/metrics.hpp"
#include "actors/prometheus_metrics.hpp"
#include "actors/system_config.hpp"
#include "actors/trainer.hpp"
#include "actors/warm_start.hpp"
#include "cluster_harness.hpp"
#include "learner/learner.hpp"
#include "learner/shard.hpp"

using namespace gridtrain;
using config::LayerType;

namespace {

// Ten classes of 16-float samples: class c is a noisy bump at float c. Learnable, but not in one step.
learner::Dataset synthetic(std::size_t count, std::uint32_t seed) {
  learner::Dataset d;
  d.sample_shape = {1, 4, 4};
  d.sample_floats = 16;
  d.count = count;
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  for (std::size_t i = 0; i < count; ++i) {
    int label = static_cast<int>(i % 10);
    d.labels.push_back(label);
    for (int j = 0; j < 16; ++j) d.images.push_back(noise(rng) + (j == label ? 2.0f : 0.0f));
  }
  return d;
}

config::Config training_config(double alpha, int epochs) {
  auto c = testing::cluster_config(2, alpha, 64);
  c.learner.kind = config::LearnerKind::model;
  c.learner.device = config::Device::cpu;
  c.learner.threads = 1;
  c.learner.epochs = epochs;
  c.learner.batch = 16;
  c.learner.model.input = {1, 4, 4};
  c.learner.model.layers = {{.type = LayerType::flatten},
                            {.type = LayerType::dense, .units = 24},
                            {.type = LayerType::relu},
                            {.type = LayerType::dense, .units = 10},
                            {.type = LayerType::softmax_cross_entropy}};
  return c;
}

std::shared_ptr<learner::Learner> make_learner(const config::Config& c, const learner::Dataset& train, int index,
                                               int count) {
  learner::Shard shard{.index = static_cast<std::size_t>(index), .count = static_cast<std::size_t>(count),
                       .seed = c.learner.seed};
  auto created = learner::Learner::create(c.learner, learner::take_shard(train, shard));
  REQUIRE(created.ok());
  return std::move(created.value());
}

struct Run {
  std::vector<std::vector<float>> params;  // each node's, at the end
  std::vector<double> accuracy;
  std::vector<actors::EpochReport> last;  // each node's last epoch report
  std::uint64_t steps = 0;                // each node's, in all
  std::vector<std::uint64_t> final_rounds;  // each node's rounds once training is over
};

// Four nodes on quarters of `train`; with alpha > 0 in one in-process cluster, else alone. With every_steps > 0
// the LineMasters start a round only when their node's trainer grants one, once per every_steps steps.
Run train_four(double alpha, int epochs, int every_steps = 0) {
  const auto train = synthetic(1600, 1);
  const auto test = synthetic(200, 2);
  auto c = training_config(alpha > 0 ? alpha : 0.5, epochs);
  std::unique_ptr<testing::TestCluster> cluster;
  if (alpha > 0) cluster = std::make_unique<testing::TestCluster>(c);
  std::vector<std::shared_ptr<learner::Learner>> learners;
  std::vector<actors::NodeHandle> nodes;
  for (int i = 0; i < 4; ++i) {
    learners.push_back(make_learner(c, train, i, 4));
    if (cluster)
      nodes.push_back(cluster->add(static_cast<std::uint64_t>(i + 1),
                                   std::shared_ptr<learner::ParameterStore>(learners[i], &learners[i]->params()),
                                   every_steps > 0 ? std::optional<std::uint64_t>(0) : std::nullopt));
  }
  Run run;
  run.last.resize(4);
  run.steps = learners[0]->steps_per_epoch() * epochs;
  std::mutex m;
  std::vector<std::unique_ptr<actors::Trainer>> trainers;
  for (int i = 0; i < 4; ++i) {
    actors::TrainerSetup setup;
    setup.learner = learners[i];
    setup.test = test;
    if (cluster) setup.rounds = [h = nodes[i]] { return h.stats().total().rounds_done; };
    setup.every_steps = every_steps;
    if (cluster && every_steps > 0)
      setup.grant_round = [h = nodes[i]] {
        for (std::uint32_t d = 0; d < 2; ++d) h.grant_rounds(d, 1);
      };
    setup.on_epoch = [&run, &m, &nodes, i, every_steps](const actors::EpochReport& r) {
      {
        std::lock_guard lock(m);
        run.last[i] = r;
      }
      // Machines are noisy: an epoch may end before a round does. Waiting here for one more round makes every
      // later epoch see at least one, so that its tau is finite whatever the timing. (Not with every_steps: the
      // rounds then wait for the trainers' grants, and a trainer waiting here would not grant.)
      if (!nodes.empty() && every_steps == 0)
        testing::eventually([h = nodes[i], r] { return h.stats().total().rounds_done > r.rounds; });
    };
    trainers.push_back(std::make_unique<actors::Trainer>(std::move(setup)));
  }
  for (auto& t : trainers) t->start();
  for (auto& t : trainers) t->join();
  for (auto& h : nodes) {
    // Granted rounds run on after training; wait for one at least, then read the count.
    testing::eventually([&h] { return h.stats().total().rounds_done > 0; });
    run.final_rounds.push_back(h.stats().total().rounds_done);
  }
  // Stop the averaging before reading, so that what is compared is one moment's parameters.
  if (cluster)
    for (int i = 0; i < 4; ++i) cluster->stop(static_cast<std::uint64_t>(i + 1));
  for (int i = 0; i < 4; ++i) {
    run.params.push_back(testing::read(learners[i]->params()));
    run.accuracy.push_back(trainers[i]->final_accuracy());
  }
  return run;
}

// The largest distance of a node's parameters from the nodes' mean, relative to the mean's norm.
double spread(const std::vector<std::vector<float>>& params) {
  std::vector<double> mean(params[0].size(), 0.0);
  for (const auto& p : params)
    for (std::size_t j = 0; j < p.size(); ++j) mean[j] += p[j] / static_cast<double>(params.size());
  double norm = 0, worst = 0;
  for (double v : mean) norm += v * v;
  for (const auto& p : params) {
    double d = 0;
    for (std::size_t j = 0; j < p.size(); ++j) d += (p[j] - mean[j]) * (p[j] - mean[j]);
    worst = std::max(worst, std::sqrt(d));
  }
  return worst / std::sqrt(norm);
}

}  // namespace

TEST_CASE("four nodes training beside elastic averaging all learn, stay closer than nodes alone, and report tau") {
  auto averaged = train_four(0.3, 6);
  auto alone = train_four(0, 6);
  for (int i = 0; i < 4; ++i) {
    CHECK(averaged.accuracy[i] > 0.3);  // chance is 0.1
    CHECK(averaged.last[i].epoch == 6);
    CHECK(averaged.last[i].rounds > 0);
    CHECK(std::isfinite(averaged.last[i].tau));
    CHECK(averaged.last[i].tau > 0);
    CHECK(std::isinf(alone.last[i].tau));  // no rounds: no elastic update to count steps by
  }
  CHECK(spread(averaged.params) < 0.5 * spread(alone.params));
}

TEST_CASE("with every_steps n a line runs at most one round per n steps of its master's learner") {
  const int n = 10;
  auto run = train_four(0.3, 6, n);
  // Each node is in two lines (2x2 grid); each line's master grants one round per n of its own steps, and every
  // learner takes run.steps steps: so at most 2 * steps / n rounds reach a node, whatever the timing.
  REQUIRE(run.final_rounds.size() == 4);
  for (int i = 0; i < 4; ++i) {
    CHECK(run.final_rounds[i] > 0);
    CHECK(run.final_rounds[i] <= 2 * run.steps / n);
  }
}

TEST_CASE("a checkpoint's state restored into a fresh learner continues the same run") {
  const auto train = synthetic(200, 3);
  auto c = training_config(0.5, 3);
  auto a = make_learner(c, train, 0, 1);
  for (int i = 0; i < 17; ++i) a->step();
  auto saved = actors::Trainer::checkpoint_data(*a);
  CHECK(saved.step == 17);
  auto b = make_learner(c, train, 0, 1);
  actors::Trainer::restore(*b, saved);
  CHECK(b->steps() == 17);
  CHECK(testing::read(b->params()) == testing::read(a->params()));
  a->step();
  b->step();
  CHECK(testing::read(b->params()) == testing::read(a->params()));
}

TEST_CASE("the progress line and the CSV row carry every field, in a stable order") {
  actors::EpochReport r{.epoch = 3, .samples = 4500, .time_s = 12.5, .samples_per_s = 1500, .loss = 0.25,
                        .test_loss = 0.3, .test_accuracy = 0.875, .tau = 2.5, .rounds = 40};
  CHECK(actors::progress_line(r) ==
        "epoch 3 samples 4500 samples_per_s 1500 loss 0.2500 test_accuracy 0.8750 tau 2.50 rounds 40");
  CHECK(actors::csv_row("n1", r) == "12.500,n1,3,4500,1500.0,0.25000,0.87500,2.500,40");
  r.tau = INFINITY;
  CHECK(actors::progress_line(r).find("tau inf rounds") != std::string::npos);
  CHECK(actors::csv_row("n1", r).find(",0.87500,,40") != std::string::npos);
}

namespace {

// GET /metrics over loopback with a plain socket; the whole response, headers included.
std::string http_get_metrics(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  REQUIRE(::send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size()));
  std::string response;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) response.append(buffer, static_cast<std::size_t>(n));
  ::close(fd);
  return response;
}

}  // namespace

TEST_CASE("the Prometheus endpoint serves rounds per dimension, drops, tau, throughput, loss and accuracy") {
  auto started = actors::PrometheusMetrics::start(config::Endpoint{"127.0.0.1", 0}, "n7");
  REQUIRE(started.ok());
  auto& metrics = *started.value();
  REQUIRE(metrics.port() != 0);
  actors::NodeStats stats;
  stats.dims.resize(2);
  stats.dims[0].rounds.rounds_done = 5;
  stats.dims[1].rounds.rounds_done = 3;
  stats.dims[1].rounds.stale_dropped = 2;
  metrics.update(stats);
  stats.dims[0].rounds.rounds_done = 9;  // cumulative: the counter gains 4
  metrics.update(stats);
  metrics.update(actors::EpochReport{.epoch = 1, .samples = 1000, .samples_per_s = 250, .loss = 0.5,
                                     .test_accuracy = 0.75, .tau = 1.5, .rounds = 12});
  auto page = http_get_metrics(metrics.port());
  INFO(page);
  CHECK(page.find("200 OK") != std::string::npos);
  CHECK(page.find(R"(gridtrain_rounds_total{dim="0",node="n7"} 9)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_rounds_total{dim="1",node="n7"} 3)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_stale_dropped_total{node="n7"} 2)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_tau{node="n7"} 1.5)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_samples_per_second{node="n7"} 250)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_train_loss{node="n7"} 0.5)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_test_accuracy{node="n7"} 0.75)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_samples_total{node="n7"} 1000)") != std::string::npos);
}

TEST_CASE("warm start copies a peer's model into the joining node's store, and refuses another model") {
  auto c = training_config(0.3, 1);
  actors::SystemConfig system_config{c};
  caf::actor_system system{system_config};
  auto peer_store = testing::make_store(30, 5.0f);
  auto peer = system.spawn([peer_store]() -> caf::behavior { return actors::warm_params_handler(peer_store); });
  auto joining = testing::make_store(30, -1.0f);
  REQUIRE(testing::read(*joining) != testing::read(*peer_store));
  auto copied = actors::fetch_model(system, peer, *joining);
  CHECK(copied.ok());
  CHECK(testing::read(*joining) == testing::read(*peer_store));

  auto other = testing::make_store(31, 0.0f);  // another shape: another model
  auto before = testing::read(*other);
  CHECK_FALSE(actors::fetch_model(system, peer, *other).ok());
  CHECK(testing::read(*other) == before);
  caf::anon_send_exit(peer, caf::exit_reason::user_shutdown);
}

TEST_CASE("warm start prefers a line peer, takes any member otherwise, and nobody when alone") {
  auto member = [](std::uint64_t id, std::int32_t x, std::int32_t y) {
    actors::NodeStatus n;
    n.id = id;
    n.coords = {x, y};
    return n;
  };
  actors::ClusterStatus status;
  status.nodes = {member(1, 0, 0), member(2, 1, 1), member(3, 1, 0)};
  auto line_peer = actors::warm_start_peer(status, 2);
  REQUIRE(line_peer);
  CHECK(line_peer->id == 3);  // shares coordinate 0 with node 2; node 1 shares none
  status.nodes = {member(1, 0, 0), member(2, 1, 1)};
  auto any = actors::warm_start_peer(status, 2);
  REQUIRE(any);
  CHECK(any->id == 1);
  status.nodes = {member(2, 1, 1)};
  CHECK_FALSE(actors::warm_start_peer(status, 2));
}

TEST_CASE("a node joining a running cluster copies a member's current model through the member's Node") {
  auto c = training_config(0.3, 1);
  testing::TestCluster cluster(c);
  auto first_store = testing::make_store(40, 3.0f);
  // No rounds (budget 0): only the warm start moves a store. Copies: add() may move the handles it keeps.
  auto first = cluster.add(1, first_store, std::uint64_t{0});
  auto joining_store = testing::make_store(40, -2.0f);
  auto joining = cluster.add(2, joining_store, std::uint64_t{0});
  auto status = cluster.status();
  auto peer = actors::warm_start_peer(status, joining.id());
  REQUIRE(peer);
  CHECK(peer->id == first.id());
  CHECK(actors::fetch_model(cluster.system(), first.actor(), *joining_store).ok());
  CHECK(testing::read(*joining_store) == testing::read(*first_store));
}
