// Joining: the node's Join and the GridMaster's challenge, its seeds asked one after another (and again after a
// pause while one says "try again"), the end of the join (conclude), a bootstrap's GridMaster, and the Joins it
// passes on as a seed (actors/node_internal.hpp).

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "actors/dimension_node.hpp"
#include "actors/node_internal.hpp"
#include "actors/token_proof.hpp"

namespace gridtrain::actors::node_internal {

namespace {

// What a seed tells a joiner whose Join it passed on when the GridMaster is lost before it took the Join in.
constexpr const char* kGridMasterLostWithJoin =
    "the GridMaster it passed the Join on to was lost before it took the Join in; try again";

// How long a joining node waits before it asks its seeds again after one said "try again" (ask_next_seed): 500 ms,
// doubling each pass up to 4 s, so that many joiners turned away at once (a busy gate) do not come back in step.
constexpr std::chrono::milliseconds kSeedRetryPause{500};
constexpr std::chrono::milliseconds kSeedRetryPauseMost{4000};

// The seeds a joining node asks, in order: its list, or the one in-process seed (NodeSetup::seed_node).
std::size_t seed_count(const NodeState& s) { return s.setup.seed_node ? 1 : s.setup.seeds.size(); }

}  // namespace

// This node's Join number `request`: without a nonce (0) the first send, which only asks for a challenge; with
// the GridMaster's nonce, the answer, with the token proof over it.
Join make_join(Self self, std::uint64_t request, std::uint64_t nonce, bool vote) {
  auto& s = self->state;
  return Join{s.setup.node_id, s.address, s.setup.data_plane->address(), s.setup.store->signature(),
              s.setup.store->size(), protocol_version, request, nonce,
              nonce == 0 ? std::string() : token_proof(s.setup.credentials.token, s.setup.node_id, nonce),
              caf::actor_cast<caf::actor>(self), s.dimension_nodes, s.line_masters, s.epoch, vote,
              s.phase == NodePhase::rejoining && s.lines_kept, s.setup.config.allreduce.wire};
}

// Asks `to` (a member, which passes it on, or a GridMaster) to let this node in; the GridMaster's JoinChallenge
// comes back, and the node answers it (see its JoinChallenge handlers in node.cpp).
void send_join(Self self, const caf::actor& to, bool vote) {
  auto& s = self->state;
  const std::uint64_t request = ++s.join_requests;
  s.pending_joins[request] = vote;
  if (s.pending_joins.size() > kMaxPendingJoins) s.pending_joins.erase(s.pending_joins.begin());
  self->send(to, make_join(self, request, 0, vote));
}

// Joining: `holder` holds our Join now (NodeState::join_holder), and is watched; the one before no longer matters
// (a seed that passed the Join on, once the GridMaster's challenge has come).
void watch_join_holder(Self self, const caf::actor& holder, std::string name) {
  auto& s = self->state;
  if (s.phase != NodePhase::joining || !holder) return;
  if (s.join_holder != holder.address()) {
    if (s.join_holder) self->demonitor(s.join_holder);
    self->monitor(holder);
    s.join_holder = holder.address();
  }
  s.join_holder_name = std::move(name);
}

void forget_join_holder(Self self) {
  auto& s = self->state;
  if (s.join_holder) self->demonitor(s.join_holder);
  s.join_holder = nullptr;
}

// As the joiner's seed: the GridMaster (or the successor this node stands with) decides, and answers the joiner
// itself. Passed on as a request, whose empty answer says the GridMaster has taken the Join in; until then it is
// held in passed_joins, so that a joiner whose Join dies with the GridMaster hears "try again" (at once from a
// GridMaster of this process, whose mailbox bounces the request; from a remote one when this node loses it:
// answer_passed_joins). A Join sent with no answer expected was lost that way, and its joiner waited out its
// join timeout and gave up.
void pass_on_join(Self self, const caf::actor& to, const Join& join) {
  auto& s = self->state;
  const std::uint64_t key = ++s.passed_sequence;
  if (join.node) {
    s.passed_joins[key] = {join.node, join.node_id};
    if (s.passed_joins.size() > kMaxPassedJoins) s.passed_joins.erase(s.passed_joins.begin());
  }
  self->request(to, s.setup.join_timeout, join)
      .then([self, key]() { self->state.passed_joins.erase(key); },
            [self, key](caf::error& e) {
              auto& passed = self->state.passed_joins;
              const auto it = passed.find(key);
              if (it == passed.end()) return;
              // A timeout says nothing of the Join: the joiner's own timeout has passed, or is about to.
              if (e == caf::sec::request_receiver_down)
                self->send(it->second.joiner, Reject{it->second.node_id, kGridMasterLostWithJoin, true});
              passed.erase(it);
            });
}

// This node has lost the GridMaster: the Joins it passed on that it had not taken in will get no answer.
void answer_passed_joins(Self self) {
  auto& s = self->state;
  for (const auto& [key, passed] : s.passed_joins)
    self->send(passed.joiner, Reject{passed.node_id, kGridMasterLostWithJoin, true});
  s.passed_joins.clear();
}

// The join is over, one way or another: tell whoever waits. A node that is not in ends.
void conclude(Self self, JoinResult result, std::string reason) {
  auto& s = self->state;
  if (s.outcome.result != JoinResult::pending) return;
  s.outcome = {result, std::move(reason)};
  if (s.setup.outcome) s.setup.outcome->set_value(s.outcome);
  for (auto& waiter : s.outcome_waiters) waiter.deliver(s.outcome);
  s.outcome_waiters.clear();
  if (result == JoinResult::welcomed) return;
  spdlog::error("node {:016x}: {}: {}", s.setup.node_id, to_string(result), s.outcome.reason);
  self->quit(caf::exit_reason::user_shutdown);
}

// Seed `i` as the log and the join's error name it.
std::string seed_name(const NodeState& s, std::size_t i) {
  return s.setup.seed_node ? std::string("the seed") : "seed " + s.setup.seeds[i].to_string();
}

// A GridMaster linked to this node, on a thread of its own unless the node runs deterministically (see
// NodeSetup::grid_master_thread).
caf::actor spawn_grid_master(Self self, GridMasterSetup setup) {
  auto& s = self->state;
  s.hosted_grid_master = s.setup.grid_master_thread
                             ? self->spawn<caf::linked + caf::detached>(grid_master, std::move(setup))
                             : self->spawn<caf::linked>(grid_master, std::move(setup));
  return s.hosted_grid_master;
}

// The GridMaster this node hosts: a bootstrap's (no `takeover`) or a candidate's.
GridMasterSetup grid_master_setup(Self self, const config::Config& config, std::optional<GridState> takeover) {
  auto& s = self->state;
  GridMasterSetup setup{config, s.setup.credentials, s.setup.store->signature(), s.setup.store->size(), s.address,
                        s.setup.node_id, std::move(takeover)};
  setup.silence_limit = silence_limit(config);
  setup.lease = grid_master_lease(config);
  return setup;
}

// Joining: asks the next seed in the list to pass our Join on. When none is left, the join has failed, with why
// each seed did not let us in; unless one of them said to try again: a member between two GridMasters (the old
// one died and the election is on) or a seed that is itself still joining lets us in a moment later. Then the
// list is asked again after a pause (kSeedRetryPause, growing), pass after pass, until the join's timeout
// (NodeSetup::join_timeout). A seed whose gate answered busy (a flood of connections) or timed out says "try
// again" too.
// Found when a node restarted right after its cluster's GridMaster was killed: every seed was between
// GridMasters, and the node gave up within milliseconds, telling its user "try again".
// An in-process seed (NodeSetup::seed_node) is a list of one.
void ask_next_seed(Self self, const std::string& why_not_the_last) {
  auto& s = self->state;
  if (!why_not_the_last.empty()) s.seed_failures += (s.seed_failures.empty() ? "" : "; ") + why_not_the_last;
  if (s.phase != NodePhase::joining) return;
  if (s.seed_next >= seed_count(s)) {
    if (!s.seed_said_retry) {
      const std::string& why = s.seed_failures.empty() ? s.seed_failures_before : s.seed_failures;
      return conclude(self, JoinResult::unreachable, why);
    }
    s.seed_said_retry = false;
    s.seed_next = 0;
    spdlog::info("node {:016x}: no seed let it in yet ({}); asking them again", s.setup.node_id, s.seed_failures);
    s.seed_failures_before = std::exchange(s.seed_failures, std::string());
    const auto pause = std::min(kSeedRetryPause * (1u << std::min<std::uint32_t>(s.seed_passes++, 3)),
                                kSeedRetryPauseMost);
    self->delayed_send(self, pause, seed_retry_atom::value);
    return;
  }
  const std::size_t index = s.seed_next++;
  if (s.setup.seed_node) {
    watch_join_holder(self, s.setup.seed_node, seed_name(s, index));
    return send_join(self, s.setup.seed_node);
  }
  const config::HostPort seed = s.setup.seeds[index];
  self->request(middleman(self), s.setup.join_timeout, caf::connect_atom::value, seed.host, seed.port)
      .then(
          [self, seed, name = seed_name(s, index)](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
            if (!ptr) return ask_next_seed(self, "no node at " + name);
            const auto seed_node = caf::actor_cast<caf::actor>(ptr);
            watch_join_holder(self, seed_node, name);
            send_join(self, seed_node);
          },
          [self, seed](caf::error& e) {
            // A gate that refused our token or our certificate is the cluster's answer, as a rejected Join is:
            // no other seed of the same cluster would let us in.
            if (is_refusal(e))
              return conclude(self, JoinResult::rejected, "seed " + seed.to_string() + ": " + self->system().render(e));
            // A gate with no room for us now (a flood, or many nodes at once), or a seed too loaded to finish the
            // handshakes in time, may let us in a moment later: the next seed now, and the list again after a
            // pause. Found in CI: a seed under a flood of connections from a stranger took longer than
            // cluster.connection_timeout_ms for CAF's handshake once, and the joiner gave up at once.
            if (may_let_in_later(e)) self->state.seed_said_retry = true;
            ask_next_seed(self, "cannot reach seed " + seed.to_string() + ": " + self->system().render(e));
          });
}

// This node's endpoint on the process's data plane, where start_node opened none (see endpoint_setup).
std::shared_ptr<dataplane::Endpoint> add_own_endpoint(Self self) {
  auto& s = self->state;
  return s.setup.data_plane->add_endpoint(
      endpoint_setup(s.setup.node_id, s.setup.store, s.setup.credentials.token, s.data_routes));
}

void begin(Self self, std::string address) {
  auto& s = self->state;
  s.address = std::move(address);
  self->delayed_send(self, s.setup.join_timeout, join_timeout_atom::value);
  if (s.setup.seed_node || !s.setup.seeds.empty()) {
    ask_next_seed(self, "");
  } else {
    // Bootstrap: this node hosts the cluster's GridMaster, and joins it like any other node.
    auto gm = spawn_grid_master(self, grid_master_setup(self, s.setup.config, std::nullopt));
    send_join(self, gm);
  }
}

}  // namespace gridtrain::actors::node_internal
