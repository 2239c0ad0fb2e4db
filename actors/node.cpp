#include "actors/node.hpp"

#include <caf/io/middleman.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <compare>
#include <tuple>
#include <utility>

#include "actors/dimension_node.hpp"
#include "actors/direct_connection.hpp"
#include "actors/gate.hpp"
#include "actors/dropped.hpp"
#include "actors/grid_master.hpp"
#include "actors/line_master.hpp"
#include "actors/token_proof.hpp"
#include "actors/warm_start.hpp"
#include "allreduce/elastic_update.hpp"
#include "allreduce/replica_distance.hpp"
#include "config/endpoint.hpp"

namespace gridtrain::actors {

namespace {

using Self = caf::stateful_actor<NodeState>*;

// Every dial of this node passes the peer's gate with its token (actors/gate.hpp).
caf::io::middleman_actor middleman(Self self) { return gate_middleman(self->system(), self->state.setup.credentials); }

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
// comes back, and the node answers it (see the handler below).
void send_join(Self self, const caf::actor& to, bool vote = false) {
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

// What a seed tells a joiner whose Join it passed on when the GridMaster is lost before it took the Join in.
constexpr const char* kGridMasterLostWithJoin =
    "the GridMaster it passed the Join on to was lost before it took the Join in; try again";

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

// Asks every DimensionNode for its counters, then calls `done` with them (a default entry for one that did not
// answer). Pulled, not pushed: the DimensionNodes change their counters thousands of times a second.
void collect_dims(Self self, std::function<void(std::vector<DimensionStats>)> done) {
  auto& s = self->state;
  struct Pending {
    std::vector<DimensionStats> dims;
    std::size_t missing;
    std::function<void(std::vector<DimensionStats>)> done;
  };
  auto pending =
      std::make_shared<Pending>(Pending{std::vector<DimensionStats>(kDimsOffered), kDimsOffered, std::move(done)});
  for (std::uint32_t d = 0; d < kDimsOffered; ++d) {
    pending->dims[d].dim = d;
    auto arrived = [pending] {
      if (--pending->missing == 0) pending->done(std::move(pending->dims));
    };
    self->request(s.dimension_nodes[d], std::chrono::seconds(10), stats_atom::value)
        .then([pending, d, arrived](DimensionStats& x) { pending->dims[d] = std::move(x); arrived(); },
              [arrived](caf::error&) { arrived(); });
  }
}

NodeReport make_report(Self self, const std::vector<DimensionStats>& dims) {
  auto& s = self->state;
  NodeReport r;
  r.node_id = s.setup.node_id;
  NodeFigures& f = r.figures;
  for (const auto& d : dims) {
    f.rounds_done += d.rounds.rounds_done;
    f.stale_dropped += d.rounds.stale_dropped;
    f.quorum_shortfalls += d.rounds.quorum_shortfalls;
  }
  // Read in place, tensor by tensor under its lock: a copy of the model every report cost a 64 MB model 10% of a
  // core. Eight partial sums, so that the loop is not one chain of dependent additions. The samples (for the
  // replicas' distance) every report; the mean and norm when due (NodeState::param_stats).
  const learner::ParameterStore& store = *s.setup.store;
  const std::vector<std::size_t> sampled = allreduce::replica_sample_indices(store.size());  // ascending
  r.sample.values.resize(sampled.size());
  const auto pass_start = std::chrono::steady_clock::now();
  const bool stats_due = pass_start >= s.param_stats.due;
  std::array<double, 8> sums{}, squares{};
  std::size_t next_sample = 0;
  for (std::size_t i = 0; i < store.tensor_count(); ++i) {
    std::lock_guard<std::mutex> hold(store.mutex(i));
    const std::span<const float> x = store.data(i);
    const std::size_t offset = store.tensor(i).offset;
    if (stats_due) {
      std::size_t t = 0;
      for (; t + 8 <= x.size(); t += 8)
        for (std::size_t j = 0; j < 8; ++j) {
          sums[j] += x[t + j];
          squares[j] += static_cast<double>(x[t + j]) * x[t + j];
        }
      for (; t < x.size(); ++t) {
        sums[0] += x[t];
        squares[0] += static_cast<double>(x[t]) * x[t];
      }
    }
    for (; next_sample < sampled.size() && sampled[next_sample] < offset + x.size(); ++next_sample)
      r.sample.values[next_sample] = x[sampled[next_sample] - offset];
  }
  if (stats_due) {
    double sum = 0, square_sum = 0;
    for (std::size_t j = 0; j < 8; ++j) {
      sum += sums[j];
      square_sum += squares[j];
    }
    s.param_stats.mean = store.size() != 0 ? sum / static_cast<double>(store.size()) : 0;
    s.param_stats.l2 = std::sqrt(square_sum);
    const auto pass_end = std::chrono::steady_clock::now();
    s.param_stats.due = pass_end + NodeState::kParamStatsCostFactor * (pass_end - pass_start);
  }
  f.param_mean = s.param_stats.mean;
  f.param_l2 = s.param_stats.l2;
  if (s.grid()) {
    r.epoch = s.grid()->epoch;
    r.layout_version = s.grid()->layout_version;
  }
  if (s.setup.progress) {
    f.samples = s.setup.progress->samples.load(std::memory_order_relaxed);
    f.test_accuracy = s.setup.progress->test_accuracy.load(std::memory_order_relaxed);
    f.epochs_done = s.setup.progress->epochs_done.load(std::memory_order_relaxed);
  }
  return r;  // without a trainer, samples and test_accuracy stay 0 and -1
}

// lost_atom to its DimensionNodes and LineMasters (they pass it on to the data plane): every line, or with (epoch,
// layout_version) those older than that.
template <class... Version>
void drop_lines(Self self, Version... version) {
  for (const auto& d : self->state.dimension_nodes) self->send(d, lost_atom::value, version...);
  for (const auto& m : self->state.line_masters) self->send(m, lost_atom::value, version...);
}

// Ends the lines this node may still hold that a newer layout has no place for: a DimensionNode's line in a dimension
// the layout gave up (9 nodes in 3 x 3 down to 5 in one line), and a LineMaster's line where the layout makes this
// node master of none. No message would end them otherwise: no line starts in a dimension given up; StopLine goes
// only to a master that is alive and known (a successor that takes over restarts the layout's lines, and stops
// none of the epoch before). Kept, a member's data plane dialed its dead peers there every 2 s for good, and a
// master nudged peers (line_master.hpp) that had moved on. A line newer than `grid` is left alone (lost_atom's
// version), so a StartLine that overtook this state stays.
void end_lines_outside(Self self, const GridState& grid) {
  auto& s = self->state;
  const LayoutState& layout = grid.layout;
  std::vector<bool> masters(s.line_masters.size(), false);  // by dimension: this node masters a line there
  for (std::size_t j = 0; j < layout.master_dims.size() && j < layout.master_nodes.size(); ++j)
    if (layout.master_nodes[j] == s.setup.node_id && layout.master_dims[j] < masters.size())
      masters[layout.master_dims[j]] = true;
  for (std::size_t d = grid.dims; d < s.dimension_nodes.size(); ++d)
    self->send(s.dimension_nodes[d], lost_atom::value, grid.epoch, grid.layout_version);
  for (std::size_t d = 0; d < s.line_masters.size(); ++d)
    if (!masters[d]) self->send(s.line_masters[d], lost_atom::value, grid.epoch, grid.layout_version);
}

// Calls `then` with the node actor at `address` (host:port, or "local:<id>" for a member of this process), or
// with null when it cannot be reached within rejoin_interval. `known` is its handle from the last GridState, if
// any: over a direct connection that already exists it is used as it is, since dialing a second one would give
// the pair two connections, which CAF 0.17's BASP confuses (messages one way were lost: a vote never reached the
// candidate, seen in the training failover test). A member that dialed us has its connection in the routing
// table, but not in the middleman's cache of connections we dialed, so a connect would dial again.
void reach(Self self, const std::string& address, const caf::actor& known, std::function<void(caf::actor)> then) {
  auto& s = self->state;
  if (s.grid()) {
    for (const MemberState& m : s.grid()->members)
      if (m.place.address == address && m.node && m.node.node() == self->node()) return then(m.node);
  }
  auto endpoint = config::parse_endpoint(address);
  if (!endpoint) return then(nullptr);  // a node of this process that has gone
  auto dial = [self, to = endpoint.value(), then] {
    self->request(middleman(self), self->state.setup.rejoin_interval, caf::connect_atom::value, to.host, to.port)
        .then([then](caf::node_id&, caf::strong_actor_ptr& ptr,
                     std::set<std::string>&) { then(caf::actor_cast<caf::actor>(ptr)); },
              [then](caf::error&) { then(nullptr); });
  };
  if (!known || known.node() == self->node()) return dial();
  // The middleman answers an empty host for a node it reaches only through another, or not at all.
  self->request(middleman(self), s.setup.rejoin_interval, caf::get_atom::value, known.node())
      .then(
          [self, known, then, dial](caf::node_id&, std::string& host, std::uint16_t port) {
            if (host.empty() || port == 0) return dial();
            // A direct route is not proof that `known` answers: a node woken from a stall still had its old
            // connections in CAF's routing table, whose peers had long given them up, and every Join it sent
            // over them vanished (1 in 25 runs of the stalled-GridMaster test never rejoined in 30 s). A handle
            // that does not answer is dialed afresh.
            self->request(known, std::chrono::milliseconds(500), outcome_atom::value)
                .then([known, then](JoinOutcome&) { then(known); }, [dial](caf::error&) { dial(); });
          },
          [dial](caf::error&) { dial(); });
}

// Withdraws the vote it gave `voted_for`, if any (a Join that is no vote takes it back).
void withdraw_vote(Self self) {
  auto& s = self->state;
  if (s.voted_for) send_join(self, s.voted_for, false);
  s.voted_for = nullptr;
}

void abandon_candidacy(Self self, const std::string& why) {
  auto& s = self->state;
  if (!s.candidate) return;
  spdlog::info("node {:016x}: no longer stands as the GridMaster's successor: {}", s.setup.node_id, why);
  self->send(s.candidate, step_down_atom::value);
  s.candidate = nullptr;
}

// The seeds a joining node asks, in order: its list, or the one in-process seed (NodeSetup::seed_node).
std::size_t seed_count(const NodeState& s) { return s.setup.seed_node ? 1 : s.setup.seeds.size(); }
std::string seed_name(const NodeState& s, std::size_t i) {
  return s.setup.seed_node ? std::string("the seed") : "seed " + s.setup.seeds[i].to_string();
}

// What a node that is no member answers a Join it cannot pass on.
constexpr const char* kNotAMember = "the seed is not a member of a cluster";
// How long a joining node waits before it asks its seeds again after one said "try again" (ask_next_seed): 500 ms,
// doubling each pass up to 4 s, so that many joiners turned away at once (a busy gate) do not come back in step.
constexpr std::chrono::milliseconds kSeedRetryPause{500};
constexpr std::chrono::milliseconds kSeedRetryPauseMost{4000};

// How long a GridMaster and a member go without hearing from each other before each counts the other lost: four
// connection timeouts, and no less than 2 s, so that it finds only what CAF cannot (nodes report every 250 ms).
std::chrono::milliseconds silence_limit(const config::Config& config) {
  return std::max(std::chrono::milliseconds(4 * config.cluster.connection_timeout_ms),
                  std::chrono::milliseconds(2000));
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
  return setup;
}

// Passes the early votes to `to` (a GridMaster, which decides), or with a null `to` answers them that this node
// is no member: their walks go on.
void release_early_votes(Self self, const caf::actor& to) {
  auto& s = self->state;
  for (const Join& join : s.early_votes) {
    if (to)
      self->send(to, join);
    else if (join.node)
      self->send(join.node, Reject{join.node_id, kNotAMember, true});
  }
  s.early_votes.clear();
}

// No member below it answered: it stands as the successor, with a GridMaster that elects from its last state.
// Any member of that state may stand, even one not confirmed yet (a majority of the confirmed ones must vote for
// it; it does not count itself then): the others see it answer and vote for it, so if it did not stand, nobody
// would. Only one that lost the GridMaster stands: one the GridMaster took out (Removed) knows it is alive.
void stand(Self self) {
  auto& s = self->state;
  const GridState* last = s.grid();
  if (!s.lines_kept || !last ||
      std::none_of(last->members.begin(), last->members.end(),
                   [&](const MemberState& m) { return m.place.node_id == s.setup.node_id; }))
    return;
  withdraw_vote(self);
  spdlog::warn("node {:016x}: no member of epoch {} below it answers; it stands as the GridMaster's successor and "
               "needs the votes of {} of the {} confirmed members",
               s.setup.node_id, last->epoch, last->quorum_members.size() / 2 + 1, last->quorum_members.size());
  GridMasterSetup setup = grid_master_setup(self, s.cluster_config.value_or(s.setup.config), *last);
  s.candidate = spawn_grid_master(self, std::move(setup));
  send_join(self, s.candidate, true);
  release_early_votes(self, s.candidate);
}

void walk_step(Self self, std::uint64_t token);

// The walk (node.hpp): every member of its last GridState in id order, then the lost GridMaster's address and the
// seeds it does not know as members. Made again for each walk, since the GridState may have grown meanwhile: a
// member it asks sends its own (see the Join handler), which may hold members this node never heard of.
void make_walk(NodeState& s) {
  s.walk.clear();
  auto known = [&](const std::string& address) {
    return address.empty() || address == s.address ||
           std::any_of(s.walk.begin(), s.walk.end(), [&](const auto& e) { return e.address == address; });
  };
  if (s.grid())
    for (const MemberState& m : s.grid()->members)
      if (m.place.node_id == s.setup.node_id || !known(m.place.address))
        s.walk.push_back({m.place.node_id, m.place.address, m.node});
  if (!known(s.grid_master_address)) s.walk.push_back({0, s.grid_master_address, nullptr});
  for (const config::Endpoint& seed : s.setup.seeds)
    if (!known(seed.to_string())) s.walk.push_back({0, seed.to_string(), nullptr});
}

void start_walk(Self self) {
  auto& s = self->state;
  make_walk(s);
  if (s.walks == 0 && s.walk.size() <= 1)
    spdlog::error("node {:016x}: it knows no other member to rejoin through", s.setup.node_id);
  s.walk_next = 0;
  s.walk_found_lower = false;
  s.walk_voted = false;
  ++s.walks;
  walk_step(self, ++s.walk_token);
}

// The next step of the rejoin walk (see node.hpp): its own entry, where it may stand; or a Join to the next
// member that answers, then a short wait for the answer; or, the walk done, the next walk after rejoin_interval.
void walk_step(Self self, std::uint64_t token) {
  auto& s = self->state;
  if (s.phase != NodePhase::rejoining || token != s.walk_token) return;
  if (s.walk_next >= s.walk.size()) {
    self->delayed_send(self, s.setup.rejoin_interval, walk_atom::value, ++s.walk_token, true);
    return;
  }
  const NodeState::WalkEntry entry = s.walk[s.walk_next++];
  const std::uint64_t next = ++s.walk_token;
  // The first walk skips the node whose GridMaster it just lost: dead, it would cost nothing, but stalled it would
  // hold the walk for a whole connect timeout. Later walks ask it too (it may be alive, and we the ones cut off).
  if (s.lines_kept && s.walks == 1 && s.grid() && entry.id == s.grid()->grid_master_node &&
      entry.id != s.setup.node_id)
    return walk_step(self, next);
  if (entry.id == s.setup.node_id) {
    if (!s.walk_found_lower && !s.candidate) stand(self);
    return walk_step(self, next);
  }
  reach(self, entry.address, entry.node, [self, entry, next](caf::actor node) {
    auto& s = self->state;
    if (s.phase != NodePhase::rejoining || next != s.walk_token) return;
    if (!node) return walk_step(self, next);
    const bool lower = entry.id != 0 && entry.id < s.setup.node_id;
    if (lower) {
      s.walk_found_lower = true;
      abandon_candidacy(self, "member " + entry.address + ", below it, answers");
      release_early_votes(self, nullptr);
    }
    // A vote goes to the first (lowest) member that answers in this walk; the others only hear a Join, which a
    // live cluster's member passes on to its GridMaster.
    const bool vote = !s.candidate && !s.walk_voted;
    if (vote) {
      s.walk_voted = true;
      if (s.voted_for != node) {
        withdraw_vote(self);
        spdlog::info("node {:016x}: asks member {} to let it back in, or to take over (its vote)", s.setup.node_id,
                     entry.address);
      }
      s.voted_for = node;
    }
    send_join(self, node, vote);
    self->delayed_send(self, s.setup.walk_answer_wait, walk_atom::value, next, false);
  });
}

// The node lost the cluster (see node.hpp): it drops its lines unless `keep_lines`, then walks the members.
void lose_cluster(Self self, const std::string& why, bool keep_lines) {
  auto& s = self->state;
  spdlog::warn("node {:016x}: {}; {}", s.setup.node_id, why,
               keep_lines ? "its lines go on while it finds the cluster's GridMaster or elects one"
                          : "dropping its lines and rejoining");
  s.phase = NodePhase::rejoining;
  if (s.grid_master) self->demonitor(s.grid_master);
  s.grid_master = nullptr;
  ++s.report_generation;
  s.lines_kept = keep_lines;
  if (!keep_lines) drop_lines(self);
  s.walks = 0;
  start_walk(self);
}

// Copies the model of a line peer (a member otherwise) into this node's store, then calls `done` with the id of
// the member copied (0: alone in its last GridState, nothing to copy) or why it could not. Through the handle the
// GridState carries, over the connection the pair already has (see reach()).
// The member asked for its model may die before it answers (a node killed as another joins): the down handler
// then asks the next member at once, rather than after the request's 30 s. At most kWarmStartTries members.
constexpr std::size_t kWarmStartTries = 3;

void warm_start_from(Self self, std::vector<std::uint64_t> tried, std::function<void(Result<std::uint64_t>)> done);
void warm_start_slice(Self self, std::uint64_t sequence, std::uint64_t from, const caf::actor& peer,
                      std::shared_ptr<std::vector<float>> model, std::uint64_t offset, std::uint64_t want);

// The member `ended` asked is gone before it answered: ask the next one, unless kWarmStartTries have been asked.
void warm_start_next(Self self, NodeState::WarmStart ended) {
  if (ended.tried.size() >= kWarmStartTries)
    return ended.done(Error{.message = "warm start: " + std::to_string(ended.tried.size()) +
                                       " members ended before they sent their model"});
  warm_start_from(self, std::move(ended.tried), std::move(ended.done));
}

void warm_start_from(Self self, std::vector<std::uint64_t> tried, std::function<void(Result<std::uint64_t>)> done) {
  auto& s = self->state;
  std::vector<Placement> places;
  if (s.grid())
    for (const MemberState& m : s.grid()->members)
      if (std::find(tried.begin(), tried.end(), m.place.node_id) == tried.end()) places.push_back(m.place);
  const auto peer = warm_start_peer(places, s.setup.node_id);
  if (!peer) {
    if (tried.empty()) return done(std::uint64_t{0});  // alone: nothing to copy
    return done(Error{.message = "warm start: every member asked died before it sent its model"});
  }
  const auto member = std::find_if(s.grid()->members.begin(), s.grid()->members.end(),
                                   [&](const MemberState& m) { return m.place.node_id == peer->node_id; });
  if (!member->node) return done(Error{.message = "warm start: member " + peer->address + " has no handle"});
  const std::uint64_t from = peer->node_id;
  const std::uint64_t sequence = ++s.warm_start_sequence;
  tried.push_back(from);
  s.warm_start_attempts.emplace(sequence, NodeState::WarmStart{member->node, std::move(tried), std::move(done)});
  self->monitor(member->node);
  warm_start_slice(self, sequence, from, member->node, std::make_shared<std::vector<float>>(s.setup.store->size()),
                   0, kWarmFirstSliceFloats);
}

// Ends the warm start `sequence` if it is still under way (nullopt otherwise: it was given up already).
std::optional<NodeState::WarmStart> take_warm_start(Self self, std::uint64_t sequence) {
  auto& attempts = self->state.warm_start_attempts;
  auto it = attempts.find(sequence);
  if (it == attempts.end()) return std::nullopt;
  self->demonitor(it->second.peer);
  auto ended = std::move(it->second);
  attempts.erase(it);
  return ended;
}

// Asks `peer` for the slice of its model at `offset` into `model` (`want` floats), then for the next one, sized by
// how fast this one came (next_warm_slice_floats); after the last, assigns the whole to our store at once (a failure
// half-way leaves the store as it was).
void warm_start_slice(Self self, std::uint64_t sequence, std::uint64_t from, const caf::actor& peer,
                      std::shared_ptr<std::vector<float>> model, std::uint64_t offset, std::uint64_t want) {
  const std::uint64_t count = warm_slice_count(model->size(), offset, want);
  const auto asked = std::chrono::steady_clock::now();
  self->request(peer, std::chrono::seconds(30), warm_params_atom::value, offset, count)
      .then(
          [self, sequence, from, peer, model, offset, count, asked](std::uint64_t signature, std::uint64_t size,
                                                                    FloatPayload& slice) {
            auto& s = self->state;
            if (!s.warm_start_attempts.count(sequence)) return;  // given up: its member died, the next was asked
            if (Status placed = place_warm_slice(*s.setup.store, *model, offset, count, signature, size, slice);
                !placed.ok()) {
              if (auto ended = take_warm_start(self, sequence)) ended->done(placed.error());
              return;
            }
            if (offset + count < model->size()) {
              const std::chrono::milliseconds timeout(
                  s.cluster_config.value_or(s.setup.config).cluster.connection_timeout_ms);
              const std::uint64_t next =
                  next_warm_slice_floats(count, std::chrono::steady_clock::now() - asked, timeout / 4);
              return warm_start_slice(self, sequence, from, peer, model, offset + count, next);
            }
            auto ended = take_warm_start(self, sequence);
            s.setup.store->assign(*model);
            ++s.warm_starts;
            ended->done(from);
          },
          [self, sequence](caf::error& e) {
            auto ended = take_warm_start(self, sequence);
            if (!ended) return;
            // A member that ended before it answered (CAF bounced the request): ask the next one.
            if (e == caf::sec::request_receiver_down) return warm_start_next(self, std::move(*ended));
            ended->done(Error{.message = "warm start: the peer did not send its model: " + self->system().render(e)});
          });
}

void warm_start(Self self, std::function<void(Result<std::uint64_t>)> done) {
  warm_start_from(self, {}, std::move(done));
}

// An actor this node monitors ended: the warm starts that wait for it ask another member (down handler).
void warm_start_peer_died(Self self, const caf::actor_addr& source) {
  auto& attempts = self->state.warm_start_attempts;
  std::vector<NodeState::WarmStart> ended;
  for (auto it = attempts.begin(); it != attempts.end();) {
    if (it->second.peer.address() != source) {
      ++it;
      continue;
    }
    ended.push_back(std::move(it->second));
    it = attempts.erase(it);
  }
  for (NodeState::WarmStart& w : ended) {
    spdlog::info("node {:016x}: warm start: node {:016x} died before it sent its model", self->state.setup.node_id,
                 w.tried.back());
    warm_start_next(self, std::move(w));
  }
}

// Rejoined: copy a line peer's model, as a node joining a running cluster does, rather than average the model it
// kept while it was out into everyone's.
void warm_start_on_rejoin(Self self) {
  warm_start(self, [self](Result<std::uint64_t> copied) {
    const std::uint64_t id = self->state.setup.node_id;
    if (!copied)
      spdlog::warn("node {:016x}: warm start skipped: {}", id, copied.error().message);
    else if (copied.value() != 0)
      spdlog::info("node {:016x}: warm start: copied the model of node {:016x}", id, copied.value());
  });
}

// Says how this node reaches `node` now: over its own connection, or through another node (which does not report
// that node's death). Asynchronous: one log line.
void log_route(Self self, const caf::node_id& node, std::string what) {
  self->request(middleman(self), std::chrono::seconds(2), caf::get_atom::value, node)
      .then(
          [self, what](caf::node_id&, std::string& host, std::uint16_t port) {
            spdlog::info("node {:016x}: its route to {}: {}", self->state.setup.node_id, what,
                         host.empty() ? std::string("through another node") : fmt::format("direct, {}:{}", host, port));
          },
          [](caf::error&) {});
}

// True, and the cluster lost, when the GridMaster has answered none of this node's reports for the silence limit.
// CAF tells a node of its GridMaster's death only over a direct connection: behind a relay, or over a connection
// that CAF 0.17 confused (two per pair of nodes), a member once followed a GridMaster dead for minutes while the
// others waited for its vote (seen in a 30-minute chaos run). A late tick means this node itself did not run (its
// process was stopped): that silence is its own, CAF's connection timeout judges it, and the watch starts afresh.
bool lost_silent_grid_master(Self self) {
  auto& s = self->state;
  const auto now = self->clock().now();
  const auto limit = silence_limit(s.cluster_config.value_or(s.setup.config));
  if (now - s.last_report_tick > limit / 2) s.grid_master_heard = now;
  s.last_report_tick = now;
  if (now - s.grid_master_heard <= limit) return false;
  if (s.grid_master && s.grid_master.node() != self->node())
    log_route(self, s.grid_master.node(), "the GridMaster's node");
  answer_passed_joins(self);
  lose_cluster(self, fmt::format("no answer from the GridMaster for over {} ms", limit.count()), true);
  return true;
}

// The GridMaster's answer to a report of `generation`: it counts this node (alive, and the route works both
// ways), or it does not (it took the node out, and its Removed was lost).
void on_report_answer(Self self, std::uint64_t generation, bool counted) {
  auto& s = self->state;
  if (generation != s.report_generation || s.phase != NodePhase::member) return;
  if (counted)
    s.grid_master_heard = self->clock().now();
  else
    lose_cluster(self, "the GridMaster no longer counts it as a member", false);
}

// One report to the GridMaster, of the membership `generation`.
void report(Self self, std::uint64_t generation) {
  collect_dims(self, [self, generation](std::vector<DimensionStats> dims) {
    auto& s = self->state;
    if (!s.grid_master || generation != s.report_generation) return;
    self->request(s.grid_master, silence_limit(s.cluster_config.value_or(s.setup.config)), make_report(self, dims))
        .then([self, generation](bool counted) { on_report_answer(self, generation, counted); },
              [](caf::error&) {});  // no answer: lost_silent_grid_master() judges the silence
  });
}

void send_reports(Self self, std::uint64_t generation) {
  auto& s = self->state;
  if (generation != s.report_generation || s.phase != NodePhase::member) return;
  if (lost_silent_grid_master(self)) return;
  report(self, generation);
  // A direct connection can be lost while both nodes live on (CAF closes one of two connections that a pair
  // dialed at once, and may purge the routes of the other side): then the pair talks through a relay, which does
  // not report a death. Checked again every few seconds; connect_directly() says which side dials.
  if (++s.reports_sent % kRouteCheckEvery == 0 && s.grid_master)
    connect_directly(self, s.setup.credentials, s.setup.node_id, s.grid_master_node_id, s.grid_master,
                     s.grid_master_address);
  self->delayed_send(self, s.setup.report_interval, tick_atom::value, generation);
}

// Joining: asks the next seed in the list to pass our Join on. When none is left, the join has failed, with why
// each seed did not let us in; unless one of them said to try again: a member between two GridMasters (the old
// one died and the election is on) or a seed that is itself still joining lets us in a moment later. Then the
// list is asked again after a pause (kSeedRetryPause, growing), pass after pass, until the join's timeout
// (NodeSetup::join_timeout). A seed whose gate answered busy (a flood of connections) says "try again" too.
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
  const config::Endpoint seed = s.setup.seeds[index];
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
            // A gate with no room for us now (a flood, or many nodes at once) may have room in a moment: the next
            // seed now, and the list again after a pause.
            if (is_busy(e)) self->state.seed_said_retry = true;
            ask_next_seed(self, "cannot reach seed " + seed.to_string() + ": " + self->system().render(e));
          });
}

// This node's endpoint on the process's data plane (see endpoint_setup).
std::shared_ptr<dataplane::Endpoint> open_data_plane(Self self) {
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

}  // namespace

caf::behavior node(caf::stateful_actor<NodeState>* self, NodeSetup setup) {
  auto& s = self->state;
  s.setup = std::move(setup);
  if (s.setup.data && s.setup.data_routes) {
    s.data = std::move(s.setup.data);
    s.data_routes = std::move(s.setup.data_routes);
  } else {
    s.data = open_data_plane(self);
  }
  for (std::uint32_t d = 0; d < kDimsOffered; ++d) {
    s.dimension_nodes.push_back(
        self->spawn<caf::linked>(dimension_node,
                                 DimensionNodeSetup{d, s.setup.node_id, s.setup.store, s.data, s.setup.credentials}));
    s.line_masters.push_back(self->spawn<caf::linked>(
        line_master, LineMasterSetup{.dim = d,
                                     .paced_by_every_steps = s.setup.paced_by_every_steps,
                                     .settle = std::chrono::milliseconds(s.setup.config.allreduce.line_settle_ms)}));
  }
  *s.data_routes = s.dimension_nodes;
  drop_unexpected(self);
  self->set_down_handler([self](caf::down_msg& down) {
    auto& s = self->state;
    warm_start_peer_died(self, down.source);
    if (s.phase == NodePhase::joining && s.join_holder && down.source == s.join_holder) {
      // Our Join died with it: ask again (the next seed now; the list again after a pause, until the timeout).
      s.join_holder = nullptr;
      s.seed_said_retry = true;
      return ask_next_seed(self, s.join_holder_name + " went down before it answered");
    }
    if (s.phase == NodePhase::member && s.grid_master && down.source == s.grid_master.address()) {
      answer_passed_joins(self);
      // A GridMaster that steps down ends normally: CAF renders that reason as "none".
      lose_cluster(self,
                   "lost contact with the GridMaster (" +
                       (down.reason ? self->system().render(down.reason) : std::string("it stepped down")) + ")",
                   true);
    }
  });
  return {
      [self](begin_atom, std::string& address) { begin(self, std::move(address)); },
      [self](join_timeout_atom) {
        auto& s = self->state;
        if (s.phase != NodePhase::joining) return;
        const std::string within = std::to_string(s.setup.join_timeout.count()) + " ms";
        const std::string& why = s.seed_failures.empty() ? s.seed_failures_before : s.seed_failures;
        conclude(self, JoinResult::unreachable,
                 why.empty() ? "no answer from the seed within " + within
                             : "no seed let it in within " + within + ": " + why);
      },
      [self](seed_retry_atom) { ask_next_seed(self, ""); },
      [self](const Welcome& w) {
        auto& s = self->state;
        const bool rejoined = s.phase == NodePhase::rejoining;
        if ((s.phase != NodePhase::joining && !rejoined) || w.node_id != s.setup.node_id || !w.grid_master) return;
        if (s.candidate && s.candidate != w.grid_master) abandon_candidacy(self, "the cluster's GridMaster let it in");
        s.candidate = nullptr;  // or it is the GridMaster now
        s.voted_for = nullptr;
        forget_join_holder(self);
        s.phase = NodePhase::member;
        s.grid_master = w.grid_master;
        s.grid_master_address = w.grid_master_address;
        s.grid_master_node_id = w.grid_master_node_id;
        release_early_votes(self, s.grid_master);  // members asking back in: the GridMaster decides
        const std::uint64_t previous_epoch = s.epoch;
        s.epoch = w.epoch;
        if (auto config = config::load_string(w.run_config, "the cluster's config"))
          s.cluster_config = std::move(config).value();
        self->monitor(s.grid_master);
        s.grid_master_heard = s.last_report_tick = self->clock().now();
        // The welcome may have come through the seed; membership traffic should not depend on it. (Only if our
        // id is the lower one: connect_directly() says why. Otherwise it stays on the route through the seed.)
        connect_directly(self, s.setup.credentials, s.setup.node_id, w.grid_master_node_id, s.grid_master,
                         w.grid_master_address);
        if (rejoined && w.kept_place) {
          ++s.rejoins;
          const bool failover = w.epoch > previous_epoch;
          if (failover) ++s.failovers;
          spdlog::info("node {:016x}: in the cluster of epoch {} under {} GridMaster (node {:016x}); it keeps its "
                       "place and its model",
                       s.setup.node_id, s.epoch, failover ? "its new" : "the same", w.grid_master_node_id);
        } else if (rejoined) {
          ++s.rejoins;
          if (s.lines_kept) drop_lines(self, w.epoch, w.layout_version);  // another cluster's now, or gone
          spdlog::info("node {:016x}: rejoined the cluster, epoch {}", s.setup.node_id, s.epoch);
          warm_start_on_rejoin(self);
        } else {
          spdlog::info("node {:016x}: welcomed into cluster epoch {}", s.setup.node_id, s.epoch);
          conclude(self, JoinResult::welcomed, "");
        }
        s.lines_kept = false;
        send_reports(self, ++s.report_generation);
      },
      [self](const Reject& r) {
        auto& s = self->state;
        if (r.node_id != s.setup.node_id) return;
        // "Not a member" is never the cluster's answer: that seed may be one a moment later. One that comes while
        // the joiner waits to ask its seeds again answers an earlier pass (held up on the way): the next pass asks.
        if (s.phase == NodePhase::joining && r.not_a_member) {
          if (s.seed_next == 0) return;
          s.seed_said_retry = true;
          return ask_next_seed(self, seed_name(s, s.seed_next - 1) + ": " + r.reason);
        }
        if (s.phase == NodePhase::joining) return conclude(self, JoinResult::rejected, r.reason);
        // Rejoining: the GridMaster may not have noticed yet that we were gone ("already in the cluster"), or the
        // member asked has lost it too (not_a_member); the walk asks again.
        if (s.phase == NodePhase::rejoining && !r.not_a_member)
          spdlog::info("node {:016x}: not let back in yet: {}", s.setup.node_id, r.reason);
      },
      [self](const Removed& r) {
        auto& s = self->state;
        if (s.phase != NodePhase::member || r.node_id != s.setup.node_id || r.epoch != s.epoch) return;
        lose_cluster(self,
                     "the GridMaster took it out of the grid (layout version " + std::to_string(r.layout_version) + ")",
                     false);
      },
      [self](walk_atom, std::uint64_t token, bool new_walk) {
        auto& s = self->state;
        if (s.phase != NodePhase::rejoining || token != s.walk_token) return;
        if (new_walk) return start_walk(self);
        walk_step(self, token);
      },
      [self](const JoinChallenge& c) {
        // Answered once, and only for a Join this node sent: a replayed Join's challenge reaches a node that
        // ignores it. The answer goes to the GridMaster itself; the first Join may have come through a seed.
        auto& s = self->state;
        const auto pending = s.pending_joins.find(c.request);
        const auto grid_master = caf::actor_cast<caf::actor>(self->current_sender());
        if (c.node_id != s.setup.node_id || c.nonce == 0 || pending == s.pending_joins.end() || !grid_master) return;
        const bool vote = pending->second;
        s.pending_joins.erase(pending);
        watch_join_holder(self, grid_master, "the GridMaster");
        if (s.phase == NodePhase::joining || s.phase == NodePhase::rejoining)
          self->send(grid_master, make_join(self, c.request, c.nonce, vote));
      },
      [self](const Join& join) {
        // We are the joiner's seed: the GridMaster decides, and answers the joiner itself.
        auto& s = self->state;
        if (s.phase == NodePhase::member && s.grid_master)
          pass_on_join(self, s.grid_master, join);
        else if (s.candidate)
          pass_on_join(self, s.candidate, join);
        else {
          if (s.phase == NodePhase::rejoining && s.lines_kept && join.vote && join.node &&
              s.early_votes.size() < kMaxWaitingJoins)
            s.early_votes.push_back(join);
          else if (join.node)
            self->send(join.node, Reject{join.node_id, kNotAMember, true});
          // A member of our GridState asks, and both of us lost the GridMaster: our GridState may name members it
          // never heard of, among them one that stands below it, whose candidacy waits for its vote. Without this,
          // two candidates each waited for a vote the other's voter held: 2 confirmed members, the one that stood
          // first not knowing the third that joined last (the other voted for it), and no cluster formed again (a
          // 5 Mbit/s link, before warm starts came in slices sized by the link). A node that is no member of it
          // (a new joiner using us as its seed) gets nothing: it takes a GridState from its GridMaster.
          if (s.phase == NodePhase::rejoining && join.node && s.grid() &&
              std::any_of(s.grid()->members.begin(), s.grid()->members.end(),
                          [&](const MemberState& m) { return m.place.node_id == join.node_id; }))
            self->send(join.node, *s.grid());
        }
      },
      [self](const GridState& grid) {
        auto& s = self->state;
        // The same version again carries news too: its confirmed members (GridState::quorum_members).
        const GridState* held = s.grid();
        const auto order = held ? std::tie(grid.epoch, grid.layout_version) <=>
                                      std::tie(held->epoch, held->layout_version)
                                : std::strong_ordering::greater;
        if (order < 0) return;
        // Only a layout that lost a dimension or came from another epoch (a successor's) can leave a line behind:
        // a GridMaster that stays stops the lines it changes. (A successor sends its state before its Welcome: a
        // node rejoining under it takes this too.)
        if (order > 0 && (!held || grid.dims < held->dims || grid.epoch != held->epoch)) end_lines_outside(self, grid);
        s.grid_message = self->current_mailbox_element()->move_content_to_message();  // no copy (node.hpp)
        // A newer layout is acknowledged at once, not at the next report: the members are confirmed only once
        // every one holds it, and a failover counts only confirmed members (docs/design.md, "Membership at scale").
        if (order > 0 && s.phase == NodePhase::member && s.grid_master) report(self, s.report_generation);
      },
      [self](tick_atom, std::uint64_t generation) { send_reports(self, generation); },
      [self](stats_atom) {
        auto promise = self->make_response_promise<NodeStats>();
        collect_dims(self, [self, promise](std::vector<DimensionStats> dims) mutable {
          auto& s = self->state;
          std::uint64_t bad = s.bad_messages;
          for (const auto& d : dims) bad += d.rounds.malformed;
          NodeStats stats{s.setup.node_id, s.phase == NodePhase::member, std::move(dims), bad, refused_payloads(),
                          {}, {}, {}};
          const dataplane::LinkRefusals refused = s.data->refusals();
          stats.data_plane = {refused.handshakes,
                              refused.bad_frames,
                              refused.oversized,
                              refused.truncated,
                              s.setup.data_plane->strangers(),
                              s.setup.data_plane->handshakes_overflowed(),
                              s.setup.data_plane->handshakes_busy_address(),
                              s.data->unreachable_peers()};
          if (!s.hosted_grid_master) {
            promise.deliver(std::move(stats));
            return;
          }
          // What the GridMaster it hosts turned away (one that ended does not answer: none then).
          self->request(s.hosted_grid_master, std::chrono::seconds(5), stats_atom::value)
              .then([promise, stats](JoinStats& joins) mutable {
                      stats.joins = joins;
                      promise.deliver(std::move(stats));
                    },
                    [promise, stats](caf::error&) mutable { promise.deliver(std::move(stats)); });
        });
        return promise;
      },
      [self](grid_view_atom) -> caf::result<caf::message> {
        if (!self->state.grid_master)
          return caf::make_error(caf::sec::request_receiver_down,
                                 self->state.phase == NodePhase::rejoining
                                     ? "not in a cluster now: it lost its GridMaster, and is rejoining or electing one"
                                     : "not in a cluster");
        return self->delegate(self->state.grid_master, grid_view_atom::value);
      },
      [self](members_atom) {
        std::vector<std::uint64_t> ids;
        if (const GridState* grid = self->state.grid())
          for (const auto& m : grid->members) ids.push_back(m.place.node_id);
        return ids;
      },
      [self](outcome_atom) -> caf::result<JoinOutcome> {
        auto& s = self->state;
        if (s.outcome.result != JoinResult::pending) return s.outcome;
        auto promise = self->make_response_promise<JoinOutcome>();
        s.outcome_waiters.push_back(promise);
        return promise;
      },
      [self](warm_start_atom) -> caf::result<std::uint64_t> {
        if (self->state.phase != NodePhase::member)
          return caf::make_error(caf::sec::request_receiver_down, "warm start: the node is not a member");
        auto promise = self->make_response_promise<std::uint64_t>();
        warm_start(self, [self, promise](Result<std::uint64_t> copied) mutable {
          if (copied)
            promise.deliver(copied.value());
          else
            promise.deliver(caf::make_error(caf::sec::runtime_error, copied.error().message));
        });
        return promise;
      },
      [self](warm_params_atom, std::uint64_t offset,
             std::uint64_t count) -> caf::result<std::uint64_t, std::uint64_t, FloatPayload> {
        // A joining node's warm start: a slice of our model now, read under the tensor locks.
        const auto& store = self->state.setup.store;
        const std::uint64_t size = store->size();
        if (offset > size || count > kWarmSliceFloats)
          return caf::make_error(caf::sec::invalid_argument,
                                 "warm start: asked for " + std::to_string(count) + " floats at " +
                                     std::to_string(offset) + " of a model of " + std::to_string(size) +
                                     " (at most " + std::to_string(kWarmSliceFloats) + " at a time)");
        FloatPayload payload;
        payload.values.resize(std::min(count, size - offset));
        store->fetch_range(offset, payload.values);
        return {store->signature(), size, std::move(payload)};
      },
      [self](allow_rounds_atom, std::uint32_t dim, std::uint64_t rounds) {
        if (dim < kDimsOffered) self->send(self->state.line_masters[dim], allow_rounds_atom::value, rounds);
      },
      [self](stop_atom) {
        auto& s = self->state;
        if (s.phase == NodePhase::leaving) return;
        const bool member = s.phase == NodePhase::member;
        s.phase = NodePhase::leaving;
        if (!member) {
          conclude(self, JoinResult::stopped, "stopped before the join was answered");
          self->quit(caf::exit_reason::user_shutdown);
          return;
        }
        spdlog::info("node {:016x}: leaving", s.setup.node_id);
        self->request(s.grid_master, std::chrono::seconds(3), Leave{s.setup.node_id, s.epoch})
            .then([self](left_atom) { self->quit(caf::exit_reason::user_shutdown); },
                  [self](caf::error&) { self->quit(caf::exit_reason::user_shutdown); });
      },
  };
}

}  // namespace gridtrain::actors
