// Training beside averaging, in-process: Trainers on Learners whose stores a cluster of Nodes averages.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "actors/system_config.hpp"
#include "actors/warm_start.hpp"
#include "cluster_harness.hpp"
#include "learner/learner.hpp"
#include "learner/shard.hpp"
#include "learner/trainer.hpp"

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
  std::vector<learner::EpochReport> last;  // each node's last epoch report
  std::uint64_t steps = 0;                // each node's, in all
  std::vector<std::uint64_t> final_rounds;  // each node's rounds once training is over
};

// Four nodes on quarters of `train`; with alpha > 0 in one in-process cluster, else alone. With every_steps > 0
// the LineMasters start a round only when their node's trainer allows one, once per every_steps steps.
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
                                   every_steps > 0));
  }
  Run run;
  run.last.resize(4);
  run.steps = learners[0]->steps_per_epoch() * epochs;
  std::mutex m;
  std::vector<std::unique_ptr<learner::Trainer>> trainers;
  for (int i = 0; i < 4; ++i) {
    learner::TrainerSetup setup;
    setup.learner = learners[i];
    setup.test = test;
    if (cluster) setup.rounds = [h = nodes[i]] { return h.stats().total().rounds_done; };
    setup.every_steps = every_steps;
    if (cluster && every_steps > 0)
      setup.on_every_steps = [h = nodes[i]] {
        h.allow_rounds(1);
      };
    setup.on_epoch = [&run, &m, &nodes, i, every_steps](const learner::EpochReport& r) {
      {
        std::lock_guard lock(m);
        run.last[i] = r;
      }
      // Machines are noisy: an epoch may end before a round does. Waiting here for one more round makes every
      // later epoch see at least one, so that its tau is finite whatever the timing. (Not with every_steps: the
      // rounds then wait for the trainers to allow them, and a trainer waiting here would not.)
      if (!nodes.empty() && every_steps == 0)
        testing::eventually([h = nodes[i], r] { return h.stats().total().rounds_done > r.rounds; });
    };
    trainers.push_back(std::make_unique<learner::Trainer>(std::move(setup)));
  }
  for (auto& t : trainers) t->start();
  for (auto& t : trainers) t->join();
  for (auto& h : nodes) {
    // Allowed rounds run on after training; wait for one at least, then read the count.
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

TEST_CASE("warm start copies a member's model into the joining node's store, and refuses another model") {
  auto c = training_config(0.3, 1);
  testing::TestCluster cluster(c);
  auto member_store = testing::make_store(30, 5.0f);
  auto member = cluster.add(1, member_store, /*paced_by_every_steps=*/true);  // no rounds: only the copy moves
  auto joining = testing::make_store(30, -1.0f);
  REQUIRE(testing::read(*joining) != testing::read(*member_store));
  CHECK(actors::fetch_model(cluster.system(), member.actor(), *joining).ok());
  CHECK(testing::read(*joining) == testing::read(*member_store));

  auto other = testing::make_store(31, 0.0f);  // another shape: another model
  const auto before = testing::read(*other);
  const Status refused = actors::fetch_model(cluster.system(), member.actor(), *other);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("another model") != std::string::npos);
  CHECK(testing::read(*other) == before);
}

TEST_CASE("warm start moves a model of several slices whole, and a member refuses a slice out of range") {
  auto c = training_config(0.3, 1);
  testing::TestCluster cluster(c);
  const std::size_t floats = actors::kWarmSliceFloats * 5 / 2;  // three slices, the last one half full
  auto member_store = testing::make_store(floats, 0.0f);
  std::vector<float> values(floats);
  for (std::size_t j = 0; j < floats; ++j) values[j] = static_cast<float>(j);  // exact: j < 2^24
  member_store->assign(values);
  auto member = cluster.add(1, member_store, /*paced_by_every_steps=*/true);
  auto joining = testing::make_store(floats, -1.0f);
  REQUIRE(actors::fetch_model(cluster.system(), member.actor(), *joining).ok());
  CHECK(testing::read(*joining) == values);

  // What a hostile or broken peer might ask: more than a slice, or past the model's end.
  caf::scoped_actor self{cluster.system()};
  const std::uint64_t asks[][2] = {{0, actors::kWarmSliceFloats + 1}, {floats + 1, 1}};
  for (const auto& ask : asks) {
    CAPTURE(ask[0]);
    CAPTURE(ask[1]);
    std::string why;
    self->request(member.actor(), std::chrono::seconds(10), actors::warm_params_atom::value, ask[0], ask[1])
        .receive([&](std::uint64_t, std::uint64_t, const actors::FloatPayload&) {},
                 [&](const caf::error& e) { why = cluster.system().render(e); });
    CHECK(why.find("at most") != std::string::npos);
  }
}

TEST_CASE("warm start sizes its slices to cross the link in a quarter of the connection timeout") {
  using std::chrono::milliseconds;
  const milliseconds budget(250);  // the default connection timeout of 1 s, over 4
  // 5 Mbit/s at 80 ms: 64 KB came in 185 ms, so the next slice is as much as comes in 250 ms, about 88 KB.
  const std::uint64_t slow = actors::next_warm_slice_floats(actors::kWarmFirstSliceFloats, milliseconds(185), budget);
  CHECK(slow > actors::kWarmFirstSliceFloats);
  CHECK(slow * 4 * 8 / 5e6 < 0.25);  // its bytes at 5 Mbit/s: within the budget
  // Slower still: never below the first slice's size.
  CHECK(actors::next_warm_slice_floats(actors::kWarmFirstSliceFloats, milliseconds(5000), budget) ==
        actors::kWarmFirstSliceFloats);
  // Fast (loopback, or 1 Gbit/s): a whole slice, the most a member serves at once.
  CHECK(actors::next_warm_slice_floats(actors::kWarmFirstSliceFloats, milliseconds(1), budget) ==
        actors::kWarmSliceFloats);
  CHECK(actors::next_warm_slice_floats(actors::kWarmFirstSliceFloats, milliseconds(0), budget) ==
        actors::kWarmSliceFloats);
  // What is asked never passes the model's end, nor a whole slice.
  CHECK(actors::warm_slice_count(100, 90, actors::kWarmFirstSliceFloats) == 10);
  CHECK(actors::warm_slice_count(actors::kWarmSliceFloats * 2, 0, actors::kWarmSliceFloats * 2) ==
        actors::kWarmSliceFloats);
}

TEST_CASE("warm start prefers a line peer, takes any member otherwise, and nobody when alone") {
  auto member = [](std::uint64_t id, std::int32_t x, std::int32_t y) {
    actors::Placement n;
    n.node_id = id;
    n.coords = {x, y};
    return n;
  };
  std::vector<actors::Placement> members;
  members = {member(1, 0, 0), member(2, 1, 1), member(3, 1, 0)};
  auto line_peer = actors::warm_start_peer(members, 2);
  REQUIRE(line_peer);
  CHECK(line_peer->node_id == 3);  // shares coordinate 0 with node 2; node 1 shares none
  members = {member(1, 0, 0), member(2, 1, 1)};
  auto any = actors::warm_start_peer(members, 2);
  REQUIRE(any);
  CHECK(any->node_id == 1);
  members = {member(2, 1, 1)};
  CHECK_FALSE(actors::warm_start_peer(members, 2));
}

TEST_CASE("a node joining a running cluster copies a member's current model through the member's Node") {
  auto c = training_config(0.3, 1);
  testing::TestCluster cluster(c);
  auto first_store = testing::make_store(40, 3.0f);
  // No rounds (paced, and never allowed one): only the warm start moves a store. Copies: add() may move the
  // handles it keeps.
  auto first = cluster.add(1, first_store, /*paced_by_every_steps=*/true);
  auto joining_store = testing::make_store(40, -2.0f);
  auto joining = cluster.add(2, joining_store, /*paced_by_every_steps=*/true);
  std::vector<actors::Placement> members;
  for (const auto& n : cluster.status().nodes) members.push_back(n.place);
  auto peer = actors::warm_start_peer(members, joining.id());
  REQUIRE(peer);
  CHECK(peer->node_id == first.id());
  CHECK(actors::fetch_model(cluster.system(), first.actor(), *joining_store).ok());
  CHECK(testing::read(*joining_store) == testing::read(*first_store));
}
