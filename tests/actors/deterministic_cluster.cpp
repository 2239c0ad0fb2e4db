#include "deterministic_cluster.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "actors/dimension_node.hpp"
#include "actors/token_proof.hpp"
#include "tests/base/require_ok.hpp"

namespace gridtrain::testing {

DeterministicCluster::DeterministicCluster(config::Config config) : config_(std::move(config)) {
  // A line that a burst of joins restarts waits allreduce.line_settle_ms of the clock before its first round, and
  // this clock stands still: such a line would never run. The LineMaster's own tests move the clock for it.
  config_.allreduce.line_settle_ms = 0;
}

actors::NodeSetup DeterministicCluster::setup(std::uint64_t id, std::shared_ptr<learner::ParameterStore> store,
                                              bool paced_by_every_steps) const {
  auto token = actors::read_token(config_.cluster.token_file);
  REQUIRE_OK(token);
  actors::NodeSetup s;
  s.config = config_;
  s.node_id = id;
  s.credentials.token = std::move(token).value();
  s.store = std::move(store);
  if (paced_by_every_steps) s.allowance = std::make_shared<actors::RoundAllowance>();
  s.data_plane = sim_.data_plane();
  s.grid_master_thread = false;  // the test scheduler runs every actor
  if (const auto running = live(); !running.empty()) s.seed_node = node(running.front());
  return s;
}

caf::actor DeterministicCluster::start(actors::NodeSetup setup) {
  const std::uint64_t id = setup.node_id;
  REQUIRE(std::none_of(members_.begin(), members_.end(), [&](const Member& m) { return m.id == id; }));
  setup.outcome = std::make_shared<std::promise<actors::JoinOutcome>>();
  std::shared_future<actors::JoinOutcome> outcome = setup.outcome->get_future().share();
  auto store = setup.store;
  const bool bootstraps = !setup.seed_node;
  caf::actor actor = sim_.spawn(actors::node, std::move(setup));
  if (bootstraps && !bootstrap_) bootstrap_ = actor;
  members_.push_back({id, actor, std::move(store), std::move(outcome)});
  caf::anon_send(actor, actors::begin_atom::value, fmt::format("local:{:016x}", id));  // as start_node names it
  return actor;
}

caf::actor DeterministicCluster::add(std::uint64_t id, std::shared_ptr<learner::ParameterStore> store,
                                     bool paced_by_every_steps) {
  caf::actor actor = start(setup(id, std::move(store), paced_by_every_steps));
  sim_.run_until([&] { return outcome(id).result != actors::JoinResult::pending; }, DeterministicSystem::kMaxEvents);
  const actors::JoinOutcome decided = outcome(id);
  CHECK_MESSAGE(decided.result == actors::JoinResult::welcomed, "node " << id << ": " << decided.reason);
  return actor;
}

const DeterministicCluster::Member& DeterministicCluster::member(std::uint64_t id) const {
  auto it = std::find_if(members_.begin(), members_.end(), [&](const Member& m) { return m.id == id; });
  if (it == members_.end()) FAIL("no node " << id);
  return *it;
}

caf::actor DeterministicCluster::node(std::uint64_t id) const { return member(id).actor; }

const std::shared_ptr<learner::ParameterStore>& DeterministicCluster::store(std::uint64_t id) const {
  return member(id).store;
}

actors::JoinOutcome DeterministicCluster::outcome(std::uint64_t id) const {
  const auto& decided = member(id).outcome;
  // Never waits: the promise is kept, or broken, by a handler that has run already, or not yet.
  if (decided.wait_for(std::chrono::seconds::zero()) != std::future_status::ready) return {};
  try {
    return decided.get();
  } catch (const std::future_error&) {
    return {actors::JoinResult::stopped, "the node ended before its join was decided"};
  }
}

bool DeterministicCluster::ended(std::uint64_t id) const { return testing::ended(node(id)); }

std::vector<std::uint64_t> DeterministicCluster::live() const {
  std::vector<std::uint64_t> out;
  for (const auto& m : members_)
    if (!testing::ended(m.actor)) out.push_back(m.id);
  return out;
}

void DeterministicCluster::stop(std::uint64_t id) {
  caf::anon_send(node(id), actors::stop_atom::value);
  REQUIRE_MESSAGE(sim_.run_until([&] { return ended(id); }, DeterministicSystem::kMaxEvents),
                  "node " << id << " did not end after stop_atom");
}

void DeterministicCluster::kill(std::uint64_t id) {
  caf::anon_send_exit(node(id), caf::exit_reason::kill);
  REQUIRE_MESSAGE(sim_.run_until([&] { return ended(id); }, DeterministicSystem::kMaxEvents),
                  "node " << id << " did not end when killed");
}

actors::NodeState& DeterministicCluster::state(std::uint64_t id) const {
  return state_of<actors::NodeState>(node(id));
}

caf::actor DeterministicCluster::grid_master_actor() const {
  return state_of<actors::NodeState>(bootstrap_).grid_master;
}

actors::GridMasterState& DeterministicCluster::grid_master() const {
  REQUIRE_MESSAGE(bootstrap_, "no node has bootstrapped the cluster");
  const caf::actor& gm = state_of<actors::NodeState>(bootstrap_).grid_master;
  REQUIRE_MESSAGE(gm, "the bootstrapping node has no GridMaster (yet)");
  return state_of<actors::GridMasterState>(gm);
}

std::vector<std::uint64_t> DeterministicCluster::members() const {
  std::vector<std::uint64_t> out;
  for (const auto& [id, m] : grid_master().members) out.push_back(id);
  return out;
}

std::uint64_t DeterministicCluster::rounds_in(std::uint64_t id, std::uint32_t dim) const {
  const auto& d = state_of<actors::DimensionNodeState>(state(id).dimension_nodes.at(dim));
  // A DimensionNode the scheduler has not started yet (no message has reached it) has no setup: no rounds.
  return d.setup.data ? d.setup.data->counters(dim).rounds_done.load() : 0;
}

std::uint64_t DeterministicCluster::rounds_total(std::uint64_t id) const {
  std::uint64_t rounds = 0;
  for (std::uint32_t d = 0; d < actors::kDimsOffered; ++d) rounds += rounds_in(id, d);
  return rounds;
}

actors::NodeStats DeterministicCluster::stats(std::uint64_t id) {
  return sim_.ask<actors::NodeStats>(node(id), actors::stats_atom::value);
}

actors::GridView DeterministicCluster::status() {
  const auto running = live();
  REQUIRE_MESSAGE(!running.empty(), "no live node to ask");
  return sim_.ask<actors::GridView>(node(running.front()), actors::grid_view_atom::value);
}

}  // namespace gridtrain::testing
