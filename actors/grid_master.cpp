#include "actors/grid_master.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <ctime>

#include "actors/direct_connection.hpp"
#include "actors/dropped.hpp"
#include "actors/token_proof.hpp"
#include "allreduce/replica_distance.hpp"

namespace gridtrain::actors {

namespace {

using Self = caf::stateful_actor<GridMasterState>*;

// Whether `join` may join, or why not (the reason the joiner prints). The order matters: a stranger learns
// nothing of our model from a join with a bad token (take_challenge checks the proof before this is asked).
Status admit(const GridMasterState& s, const Join& join) {
  auto refuse = [](std::string why) { return Error{.message = std::move(why)}; };
  if (join.protocol != protocol_version)
    return refuse("protocol version " + std::to_string(join.protocol) + " differs from the cluster's " +
                  std::to_string(protocol_version));
  // The token proof is checked before this, where the Join's challenge is taken (take_challenge).
  if (join.model_signature != s.setup.model_signature || join.model_floats != s.setup.model_floats)
    return refuse(fmt::format("a different model: signature {:016x} with {} floats, the cluster trains {:016x} "
                              "with {}",
                              join.model_signature, join.model_floats, s.setup.model_signature, s.setup.model_floats));
  if (join.wire != s.settings.round.wire)
    return refuse(fmt::format("allreduce.wire {} differs from the cluster's {}: every node of a line must encode its "
                              "chunks alike",
                              allreduce::wire_format_name(join.wire), allreduce::wire_format_name(s.settings.round.wire)));
  if (join.node_id == 0 || join.node_id == grid::kNoNode) return refuse("invalid node id");
  if (s.members.count(join.node_id))
    return refuse(fmt::format("node id {:016x} is already in the cluster", join.node_id));
  if (join.epoch > s.epoch && !s.electing)
    return refuse(fmt::format("it was a member of epoch {}, newer than this cluster's {}", join.epoch, s.epoch));
  auto all_set = [](const std::vector<caf::actor>& v) {
    return v.size() == kDimsOffered && std::all_of(v.begin(), v.end(), [](const caf::actor& a) { return bool(a); });
  };
  if (!all_set(join.dimension_nodes) || !all_set(join.line_masters))
    return refuse("malformed join: expected " + std::to_string(kDimsOffered) + " dimension nodes and line masters");
  return {};
}

// The CPU time of the calling thread, in ns: what handling a change cost the GridMaster, without the time its
// thread waited for a core (the nodes' rounds share the cores with it).
std::uint64_t cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(t.tv_nsec);
}

// The layout a GridMaster starts from, empty, as the cluster's config asks.
grid::Layout empty_layout(const config::Config& config) {
  return config.grid.dims ? grid::Layout::fixed(*config.grid.dims) : grid::Layout::automatic(config.grid.max_line);
}

// What an electing or stepping-down GridMaster tells a node that wants in: no cluster to join now, ask again.
constexpr const char* kNoGridMasterNow = "the cluster has no GridMaster now (electing one); try again";

// Tells the lines what the delta changed: every stop before any start (LayoutDelta's contract). Returns the
// control messages this makes: its own, and the StartLine each appointed LineMaster passes on to its peers.
std::uint64_t apply(Self self, const grid::LayoutDelta& delta) {
  auto& s = self->state;
  std::uint64_t messages = 0;
  for (const auto& [id, old_master] : delta.stopped) {
    auto m = s.members.find(old_master);
    if (m == s.members.end()) continue;  // it left, or died
    self->send(m->second.line_masters[static_cast<std::size_t>(id.dim)],
               StopLine{s.epoch, s.layout_version, static_cast<std::uint32_t>(id.dim), id.index});
    ++messages;
  }
  for (const grid::LineState& line : delta.started) {
    StartLine start{s.epoch, s.layout_version, static_cast<std::uint32_t>(line.id.dim), line.id.index, {},
                    s.settings, {}};
    const auto dim = static_cast<std::size_t>(line.id.dim);
    for (grid::NodeId id : line.members) {
      const auto& m = s.members.at(id);
      start.peers.push_back({id, m.dimension_nodes[dim], m.address, m.data_address});
    }
    messages += 1 + start.peers.size();
    self->send(s.members.at(line.master).line_masters[dim], std::move(start));
  }
  return messages;
}

// Every line of the layout started under the present epoch and version (a successor's takeover).
void start_all_lines(Self self) {
  grid::LayoutDelta all;
  all.started = self->state.layout.lines();
  apply(self, all);
}

}  // namespace

GridState grid_state(const GridMasterState& s) {
  GridState g{s.epoch, s.layout_version, static_cast<std::uint32_t>(s.layout.dims()), {}, {},
              layout_state(s.layout.snapshot()), s.setup.node_id,
              std::vector<std::uint64_t>(s.quorum_members.begin(), s.quorum_members.end())};
  for (int side : s.layout.shape()) g.shape.push_back(side);
  for (const auto& [id, m] : s.members) {
    MemberState ms{{id, m.address, {}, {}}, m.node, m.dimension_nodes, m.line_masters, m.data_address};
    if (s.layout.contains(id)) {
      for (int x : s.layout.coords(id)) ms.place.coords.push_back(x);
      for (int d = 0; d < s.layout.dims(); ++d)
        if (s.layout.line(s.layout.line_of(id, d)).master == id)
          ms.place.masters.push_back(static_cast<std::uint32_t>(d));
    }
    g.members.push_back(std::move(ms));
  }
  return g;
}

namespace {

// The grid's state reaches the members (for status and failover) in two ways (docs/design.md, "Membership at
// scale"): soon after a change, the joiner and the members of the lines the change restarted; the others with the
// answer to their next report. So a change costs messages in proportion to the lines it touched, not to the
// cluster. A state holds every member, so building it costs in proportion to the cluster: the states due are sent
// together by one flush (flush_atom, which this GridMaster sends itself and so handles after the messages already
// waiting), from one message built once per state_generation. Under a burst of joins (a cluster forming) or of
// reports, one build serves them all, and the GridMaster stays free to answer reports: at 4,096 nodes, a build
// per join kept it from answering for longer than the silence limit, and the members elected another.
void send_state(Self self, GridMasterState::Member& m) {
  auto& s = self->state;
  if (m.state_sent == s.state_generation) return;
  if (s.state_message_generation != s.state_generation) {
    const std::uint64_t began = cpu_ns();
    s.state_message = caf::make_message(grid_state(s));
    s.state_message_generation = s.state_generation;
    ++s.membership.state_builds;
    s.membership.state_build_ns += cpu_ns() - began;
  }
  self->send(m.node, s.state_message);
  m.state_sent = s.state_generation;
  ++s.membership.states_sent;
}

// A flush is on its way while something is due; the first thing due sends it. Call before adding to either list.
void arm_flush(Self self) {
  const auto& s = self->state;
  if (s.state_due.empty() && s.welcomes_due.empty()) self->send(self, flush_atom::value);
}

// Member `id` is sent the state at the next flush, unless it holds this generation's. Returns 1 if that makes a
// message, 0 if it has the state or one is due anyway.
std::uint64_t mark_due(Self self, std::uint64_t id, GridMasterState::Member& m) {
  auto& s = self->state;
  if (m.state_sent == s.state_generation || m.state_due) return 0;
  arm_flush(self);
  m.state_due = true;
  s.state_due.push_back(id);
  return 1;
}

// The states now due (the newest generation), then the welcomes that wait for them: a joiner's warm start reads its
// line peers from the state.
void flush(Self self) {
  auto& s = self->state;
  for (std::uint64_t id : s.state_due)
    if (auto m = s.members.find(id); m != s.members.end()) {
      m->second.state_due = false;
      send_state(self, m->second);
    }
  s.state_due.clear();
  for (Welcome& welcome : s.welcomes_due)
    if (auto m = s.members.find(welcome.node_id); m != s.members.end()) self->send(m->second.node, std::move(welcome));
  s.welcomes_due.clear();
}

// A change: a new layout version, which the present members are confirmed by once each has acknowledged it.
void next_version(GridMasterState& s) {
  ++s.layout_version;
  ++s.state_generation;
  s.confirm_version = s.layout_version;
  s.unacked = s.members.size();
}

// The members of the lines `delta` started (their lines changed) are due the state. Returns the messages that
// makes.
std::uint64_t tell_lines_state(Self self, const grid::LayoutDelta& delta) {
  auto& s = self->state;
  std::uint64_t messages = 0;
  for (const grid::LineState& line : delta.started)
    for (grid::NodeId id : line.members)
      if (auto m = s.members.find(id); m != s.members.end()) messages += mark_due(self, id, m->second);
  return messages;
}

// After a join: a new layout version, the lines told, and their members told the state. Returns the messages sent.
std::uint64_t changed(Self self, const grid::LayoutDelta& delta) {
  next_version(self->state);
  const std::uint64_t messages = apply(self, delta);
  return messages + tell_lines_state(self, delta);
}

// How many of the confirmed members it still has (its own node included).
std::size_t confirmed_present(const GridMasterState& s) {
  return static_cast<std::size_t>(std::count_if(s.quorum_members.begin(), s.quorum_members.end(),
                                                [&](std::uint64_t id) { return s.members.count(id) > 0; }));
}

// Ends this GridMaster without touching the state: its members, and its own node, notice its end and elect a
// successor among themselves, which only a majority can do.
void step_down(Self self, const std::string& why) {
  auto& s = self->state;
  spdlog::error("grid_master: stepping down from epoch {}: {}", s.epoch, why);
  for (const Join& join : s.waiting)
    self->send(join.node, Reject{join.node_id, kNoGridMasterNow, true});
  s.waiting.clear();
  self->quit(caf::exit_reason::normal);
}

void remove(Self self, std::uint64_t id, const char* why) {
  auto& s = self->state;
  auto m = s.members.find(id);
  if (m == s.members.end()) return;
  const std::uint64_t began = cpu_ns();
  self->demonitor(m->second.node);
  const grid::LayoutDelta delta = s.layout.remove(id);
  next_version(s);
  // The lines first, while the member's handles are still known: the lines it mastered get their StopLine even if
  // it is still alive (stalled past the connection timeout, say), so that its LineMasters stop driving them.
  std::uint64_t messages = apply(self, delta);
  self->send(m->second.node, Removed{id, s.epoch, s.layout_version});
  s.members.erase(m);
  --s.unacked;  // next_version counted it
  messages += 1 + tell_lines_state(self, delta);
  ++s.membership.leaves;
  s.membership.leave_messages += messages;
  s.membership.leave_ns += cpu_ns() - began;
  spdlog::info("grid_master: node {:016x} {}; {} members, layout version {}", id, why, s.members.size(),
               s.layout_version);
}

// A member's connection was lost. It may be dead, or this GridMaster may be the one cut off: it removes the
// member only if it keeps a strict majority of the confirmed members, and otherwise steps down.
// False if it stepped down.
bool lost(Self self, std::uint64_t id, const std::string& why) {
  auto& s = self->state;
  const std::size_t left = confirmed_present(s) - (s.quorum_members.count(id) ? 1 : 0);
  if (2 * left <= s.quorum_members.size()) {
    step_down(self, fmt::format("it lost node {:016x} and would reach {} of the {} confirmed members, not a "
                                "majority: it may be the one cut off",
                                id, left, s.quorum_members.size()));
    return false;
  }
  remove(self, id, why.c_str());
  return true;
}

// Every member acknowledged the version of the last change: the present members are the confirmed ones.
void confirm_if_acked(Self self) {
  auto& s = self->state;
  if (s.confirm_version == 0 || s.unacked > 0) return;
  s.confirm_version = 0;
  std::set<std::uint64_t> present;
  for (const auto& [id, m] : s.members) present.insert(id);
  if (present == s.quorum_members) return;
  s.quorum_members = std::move(present);
  // Every member is sent the state that says so, at the next flush, not with its next report: a failover counts
  // the confirmed members a node holds, and a cluster whose nodes still held the confirmed members of its first
  // join (the bootstrapping node alone) could not elect a successor to it. One state each per confirmation, and a
  // confirmation waits for every member to hold the last change: one per burst of changes.
  ++s.state_generation;
  for (auto& [id, m] : s.members) mark_due(self, id, m);
}

GridView grid_view(const GridMasterState& s) {
  GridState g = grid_state(s);
  GridView out{g.epoch, g.layout_version, g.dims, g.shape, {}, g.grid_master_node, s.membership};
  std::vector<const std::vector<float>*> samples;
  for (MemberState& ms : g.members) {
    const auto& report = s.members.at(ms.place.node_id).report;
    out.nodes.push_back(NodeView{std::move(ms.place), report ? report->figures : NodeFigures{}});
    samples.push_back(report ? &report->sample.values : nullptr);
  }
  const std::vector<double> distance = allreduce::replica_distances(samples, s.setup.model_floats);
  for (std::size_t i = 0; i < out.nodes.size(); ++i) out.nodes[i].param_distance = distance[i];
  return out;
}

Welcome welcome_for(Self self, std::uint64_t id, bool kept_place) {
  auto& s = self->state;
  return Welcome{id,
                 s.epoch,
                 config::to_yaml(s.setup.config),
                 caf::actor_cast<caf::actor>(self),
                 s.setup.address,
                 s.setup.node_id,
                 s.layout_version,
                 kept_place};
}

void reject(Self self, const Join& join, const std::string& why) {
  ++self->state.rejected;
  spdlog::warn("grid_master: rejected node {:016x} at {}: {}", join.node_id, join.address, why);
  self->send(join.node, Reject{join.node_id, why});
}

// Sends the node of `join` a nonce to prove the token over, good for one Join (docs/design.md, "Joining with a
// challenge"). A flood of Joins holds at most kMaxJoinChallenges: the expired go first, then the oldest.
void challenge(Self self, const Join& join) {
  auto& s = self->state;
  const auto now = self->clock().now();
  if (s.challenges.size() >= kMaxJoinChallenges) {
    std::erase_if(s.challenges, [&](const auto& c) { return now - c.second.sent > kJoinChallengeLifetime; });
    if (s.challenges.size() >= kMaxJoinChallenges)
      s.challenges.erase(std::min_element(s.challenges.begin(), s.challenges.end(), [](const auto& a, const auto& b) {
        return a.second.sent < b.second.sent;
      }));
  }
  std::uint64_t nonce = make_join_nonce();
  while (s.challenges.count(nonce)) nonce = make_join_nonce();
  s.challenges[nonce] = {join.node_id, now};
  self->send(join.node, JoinChallenge{join.node_id, join.request, nonce});
}

// True when `join` answers a challenge this GridMaster sent its node, not answered before and not expired, with
// a good token proof over its nonce: the challenge is taken. Otherwise the Join goes no further: without a nonce
// it is challenged; with a nonce not held (a replay, or one forgotten) it is dropped and counted; with a bad proof
// it is rejected.
bool take_challenge(Self self, const Join& join) {
  auto& s = self->state;
  if (join.nonce == 0) {
    challenge(self, join);
    return false;
  }
  const auto c = s.challenges.find(join.nonce);
  if (c == s.challenges.end() || c->second.node_id != join.node_id ||
      self->clock().now() - c->second.sent > kJoinChallengeLifetime) {
    log_dropped("grid_master", s.stale_join_proofs,
                fmt::format("a join of node {:016x} at {} with a nonce this GridMaster did not send it, or took "
                            "already (a replay?)",
                            join.node_id, join.address));
    return false;
  }
  s.challenges.erase(c);
  if (!token_proof_matches(s.setup.credentials.token, join.node_id, join.nonce, join.token_proof)) {
    reject(self, join, "bad cluster token proof");
    return false;
  }
  return true;
}

// A Join while leading: checked, then the node is placed and welcomed.
void admit_join(Self self, const Join& join) {
  auto& s = self->state;
  // A member that lost contact with us while we did not lose it (a stall shorter on our side, a stale down_msg on
  // its side): it is still in its place, with its lines. Tell it so, or it would ask forever and be refused as a
  // duplicate.
  if (auto m = s.members.find(join.node_id);
      m != s.members.end() && join.lines_kept && join.epoch == s.epoch && join.node == m->second.node) {
    // Its Join came through a seed if it lost its direct connection to us (see below).
    connect_directly(self, s.setup.credentials, s.setup.node_id, join.node_id, join.node, join.address);
    m->second.heard = m->second.lease = self->clock().now();  // the welcome renews its promise
    self->send(join.node, welcome_for(self, join.node_id, true));
    return;
  }
  if (Status admitted = admit(s, join); !admitted.ok()) return reject(self, join, admitted.error().message);
  const std::uint64_t began = cpu_ns();
  s.members.emplace(join.node_id, GridMasterState::Member{join.address, join.data_address, join.node,
                                                         join.dimension_nodes, join.line_masters, {}, 0, 0, false, 0,
                                                         self->clock().now(), self->clock().now()});
  self->monitor(join.node);
  // Its Join may have come through a seed: CAF would reach it through that node, and a death behind a relay is
  // not reliably reported (a killed member stayed in the grid for 20 s in CI). Of the two, the lower id dials;
  // the node does its half on the Welcome. (The bootstrapping node's GridMaster was every joiner's seed; a
  // successor is not.)
  connect_directly(self, s.setup.credentials, s.setup.node_id, join.node_id, join.node, join.address);
  const grid::LayoutDelta delta = s.layout.add(join.node_id);
  // The lines first, then the welcome: whoever hears of the welcome finds the lines already told.
  std::uint64_t messages = changed(self, delta);
  // The welcome goes after the state, at the flush; it names the layout version of this join, which the joiner's
  // lines were started under.
  messages += mark_due(self, join.node_id, s.members.at(join.node_id));
  arm_flush(self);
  s.welcomes_due.push_back(welcome_for(self, join.node_id, false));
  ++s.membership.joins;
  s.membership.join_messages += messages + 1;
  s.membership.join_ns += cpu_ns() - began;
  spdlog::info("grid_master: node {:016x} at {} joined; {} members, layout version {}", join.node_id, join.address,
               s.members.size(), s.layout_version);
}

// Loses the members whose reports stopped for silence_limit; looks again in a quarter of it.
void watch_silence(Self self) {
  auto& s = self->state;
  if (s.setup.silence_limit.count() == 0) return;
  const auto now = self->clock().now();
  // This look came late: the GridMaster itself did not run (its process was stopped, say). Its members'
  // silence is then its own; CAF's connection timeout judges that stall, and the watch starts afresh.
  const bool stalled = s.watched != caf::actor_clock::time_point{} && now - s.watched > s.setup.silence_limit / 2;
  s.watched = now;
  if (stalled) {
    for (auto& [id, m] : s.members) m.heard = now;
  } else if (!s.electing) {
    // A member in this process (this GridMaster's own node, or every node of an in-process cluster) is judged by
    // its down_msg alone, which CAF always delivers here: its silence only says that the scheduler is busy, since
    // the GridMaster runs on a thread of its own (NodeSetup::grid_master_thread). Unless the setup says otherwise.
    std::vector<std::uint64_t> silent;
    for (const auto& [id, m] : s.members)
      if (now - m.heard > s.setup.silence_limit && (s.setup.judge_local_silence || m.node.node() != self->node()))
        silent.push_back(id);
    for (std::uint64_t id : silent)
      if (!lost(self, id,
                fmt::format("is unreachable: no report for over {} ms (reached only through another node, its "
                            "death goes unreported)",
                            s.setup.silence_limit.count())))
        return;
  }
  self->delayed_send(self, s.setup.silence_limit / 4, silence_atom::value);
}

// Whether a strict majority of the confirmed members holds this GridMaster's lease at `now`: its own node, a
// member in this process (unless the setup judges those too), and each member that echoed an answer of ours
// within the lease. Unlike the silence watch, a look that came late counts: a GridMaster that did not run for
// longer than the lease may have been replaced meanwhile.
bool holds_lease(const GridMasterState& s, caf::actor_clock::time_point now, const caf::node_id& here) {
  if (s.quorum_members.empty()) return true;  // a bootstrap before its first member
  std::size_t holding = 0;
  for (std::uint64_t id : s.quorum_members) {
    auto m = s.members.find(id);
    if (m == s.members.end()) continue;
    const bool local = m->second.node.node() == here && !s.setup.judge_local_silence;
    if (id == s.setup.node_id || local || now - m->second.lease <= s.setup.lease) ++holding;
  }
  return 2 * holding > s.quorum_members.size();
}

// Steps down once the lease is lost (GridMasterSetup::lease); looks again in an eighth of it.
void watch_lease(Self self) {
  auto& s = self->state;
  if (!s.electing && !holds_lease(s, self->clock().now(), self->node()))
    return step_down(self, fmt::format("no strict majority of the {} confirmed members has answered it within "
                                       "its lease of {} ms: it may be the one cut off",
                                       s.quorum_members.size(), s.setup.lease.count()));
  self->delayed_send(self, s.setup.lease / 8, lease_atom::value);
}

// -- electing ----------------------------------------------------------------------------------------------------

bool in_last_state(const GridMasterState& s, std::uint64_t id) {
  const auto& q = s.setup.takeover->quorum_members;
  return std::find(q.begin(), q.end(), id) != q.end();
}

bool has_majority(const GridMasterState& s) {
  return 2 * s.votes.size() > s.setup.takeover->quorum_members.size();
}

// Every confirmed member voted but the node of the GridMaster that was lost: nobody else is worth waiting for.
bool every_vote_in(const GridMasterState& s) {
  for (std::uint64_t id : s.setup.takeover->quorum_members)
    if (id != s.setup.takeover->grid_master_node && !s.votes.count(id)) return false;
  return true;
}

// The layout as the last state had it, with only the voters: restored, then the others removed. A state that
// does not restore (it came off the wire) gives a fresh layout with the voters added in id order.
void restore_layout(Self self) {
  auto& s = self->state;
  const GridState& last = *s.setup.takeover;
  auto snapshot = layout_snapshot(last.layout);
  auto layout = snapshot ? grid::Layout::restore(snapshot.value()) : Result<grid::Layout>(snapshot.error());
  if (layout) {
    s.layout = std::move(layout).value();
  } else {
    spdlog::error("grid_master: the last layout does not restore ({}); placing the voters afresh",
                  layout.error().message);
    s.layout = empty_layout(s.setup.config);
  }
  for (grid::NodeId id : s.layout.members())
    if (!s.votes.count(id)) s.layout.remove(id);
  for (const auto& [id, vote] : s.votes)
    if (!s.layout.contains(id)) s.layout.add(id);
}

void take_over(Self self) {
  auto& s = self->state;
  const GridState& last = *s.setup.takeover;
  std::uint64_t newest = last.epoch;
  for (const auto& [id, vote] : s.votes) newest = std::max(newest, vote.epoch);
  s.electing = false;
  s.epoch = newest + 1;
  s.layout_version = last.layout_version + 1;
  restore_layout(self);
  for (const auto& [id, vote] : s.votes) {
    s.members.emplace(id, GridMasterState::Member{vote.address, vote.data_address, vote.node, vote.dimension_nodes,
                                                  vote.line_masters, {}, 0, 0, false, 0, self->clock().now(),
                                                  self->clock().now()});
    s.quorum_members.insert(id);  // each voted: it holds this cluster's state from now on
  }
  s.votes.clear();
  start_all_lines(self);
  ++s.state_generation;
  for (auto& [id, m] : s.members) {
    send_state(self, m);  // every member at once: each must know the new epoch's members to stay in it
    self->send(m.node, welcome_for(self, id, true));
  }
  spdlog::warn("grid_master: took over as the cluster's GridMaster: epoch {}, {} of the {} members of epoch {} "
               "voted; layout version {}",
               s.epoch, s.members.size(), last.quorum_members.size(), last.epoch, s.layout_version);
  std::vector<Join> waiting = std::move(s.waiting);
  s.waiting.clear();
  for (const Join& join : waiting) admit_join(self, join);
}

void check_election(Self self) {
  auto& s = self->state;
  if (!s.electing || !has_majority(s)) return;
  if (every_vote_in(s)) return take_over(self);
  if (s.grace_armed) return;
  s.grace_armed = true;
  self->delayed_send(self, s.setup.takeover_grace, takeover_atom::value);
}

// A confirmed member of the last state that left cleanly while we elect (its training ended, say): it will not
// vote, nor come back as that member, so no majority counts it. Without this, the last member of a cluster whose
// others all finished, the GridMaster's node among them, stood for good needing a vote nobody would give, and a
// staleness bound held its training 10 s at a time (seen at the end of the PyTorch example's runs).
void election_leave(Self self, const Leave& leave) {
  auto& s = self->state;
  auto& confirmed = s.setup.takeover->quorum_members;
  if (leave.epoch != s.setup.takeover->epoch || !in_last_state(s, leave.node_id)) return;
  std::erase(confirmed, leave.node_id);
  s.votes.erase(leave.node_id);
  spdlog::info("grid_master: node {:016x} left during the election: {} of the {} members of epoch {} voted",
               leave.node_id, s.votes.size(), confirmed.size(), s.setup.takeover->epoch);
  check_election(self);
}

// A Join while electing: a vote from a member of the last state, or a new node that waits for the outcome.
void election_join(Self self, const Join& join) {
  auto& s = self->state;
  if (!admit(s, join).ok()) return admit_join(self, join);  // refused, with the reason (admit says which)
  if (in_last_state(s, join.node_id)) {
    if (!join.vote) {  // no vote, or its vote taken back: it votes elsewhere, or stands itself
      s.votes.erase(join.node_id);
      self->send(join.node, Reject{join.node_id, "it is electing a GridMaster itself", true});
      return;
    }
    if (!s.votes.count(join.node_id)) self->monitor(join.node);
    s.votes[join.node_id] = join;
    spdlog::info("grid_master: vote of node {:016x}: {} of the {} members of epoch {}", join.node_id, s.votes.size(),
                 s.setup.takeover->quorum_members.size(), s.setup.takeover->epoch);
    return check_election(self);
  }
  if (s.waiting.size() >= kMaxWaitingJoins) {
    self->send(join.node, Reject{join.node_id, kNoGridMasterNow, true});
    return;
  }
  s.waiting.push_back(join);
}

// A bootstrapped cluster's first epoch: the wall clock's milliseconds, a generation number (as Cassandra's gossip
// generation is the clock at a node's start). Epochs order the GridMasters of one cluster, a successor raising it by
// one; a cluster bootstrapped later, after an earlier one lost its majority for good, must order after that one too.
// Its survivors then join it as new members (a GridMaster refuses a node of a newer epoch: the guard against a
// stale GridMaster), and their old lines, rounds and frames are all older than the new cluster's, so they are
// dropped. Every cluster's first epoch was 1: survivors of an epoch-1 cluster got in, but their data plane took
// the new cluster's lines of versions they had held as old news and sat out every round; survivors of a later epoch
// were refused for good. (A later bootstrap on a machine whose clock is behind by more than the time between the
// two bootstraps still counts as older: its Joins from the old cluster are refused, saying why.) Two bootstraps in
// one process (tests) within a millisecond still get two epochs, in order.
std::uint64_t bootstrap_epoch() {
  static std::atomic<std::uint64_t> last{0};
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  std::uint64_t epoch = static_cast<std::uint64_t>(std::max<std::int64_t>(now.count(), 1));
  std::uint64_t seen = last.load();
  do {
    epoch = std::max(epoch, seen + 1);
  } while (!last.compare_exchange_weak(seen, epoch));
  return epoch;
}

}  // namespace

LineSettings line_settings(const config::Config& config, std::uint64_t model_floats) {
  return {model_floats, static_cast<std::uint32_t>(config.grid.rounds_in_flight), config.allreduce};
}

caf::behavior grid_master(caf::stateful_actor<GridMasterState>* self, GridMasterSetup setup) {
  auto& s = self->state;
  s.setup = std::move(setup);
  s.settings = line_settings(s.setup.config, s.setup.model_floats);
  s.layout = empty_layout(s.setup.config);
  if (s.setup.takeover) {
    s.electing = true;
    s.epoch = s.setup.takeover->epoch;
  } else {
    s.epoch = bootstrap_epoch();
  }
  drop_unexpected(self);
  if (s.setup.silence_limit.count() > 0) self->delayed_send(self, s.setup.silence_limit / 4, silence_atom::value);
  if (s.setup.lease.count() > 0) self->delayed_send(self, s.setup.lease / 8, lease_atom::value);
  self->set_down_handler([self](caf::down_msg& down) {
    auto& s = self->state;
    if (s.electing) {  // a voter went away: its vote is no longer good
      for (auto it = s.votes.begin(); it != s.votes.end(); ++it)
        if (it->second.node.address() == down.source) {
          s.votes.erase(it);
          return;
        }
      return;
    }
    for (const auto& [id, m] : s.members)
      if (m.node.address() == down.source) {
        lost(self, id, "is unreachable: its connection was lost (crashed, stalled or cut off)");
        return;
      }
  });
  return {
      [self](const Join& join) {
        auto& s = self->state;
        if (!join.node) {
          log_dropped("grid_master", s.bad_messages, "a join without a node handle");
          return;
        }
        // Another protocol is refused for that (admit says so), before its Join is asked for a proof it may make
        // another way.
        if (join.protocol == protocol_version && !take_challenge(self, join)) return;
        if (s.electing) return election_join(self, join);
        admit_join(self, join);
        // The first member (the bootstrapping node, or a joiner) is confirmed at once: there is nobody to ask.
        if (s.quorum_members.empty() && !s.members.empty()) s.quorum_members.insert(join.node_id);
      },
      [self](flush_atom) { flush(self); },
      [self](takeover_atom) {
        auto& s = self->state;
        s.grace_armed = false;
        if (s.electing && has_majority(s)) take_over(self);
      },
      [self](step_down_atom) {
        if (self->state.electing) step_down(self, "its node found a member to follow");
      },
      [self](const Leave& leave) {
        auto& s = self->state;
        if (leave.epoch == s.epoch && !s.electing) {
          s.quorum_members.erase(leave.node_id);  // it agreed to go: no majority counts it now
          remove(self, leave.node_id, "left");
        } else if (s.electing) {
          election_leave(self, leave);
        }
        return left_atom::value;
      },
      // The answer says whether the reporter is a member: a member that gets none for the silence limit counts this
      // GridMaster lost (see node_report.cpp), one told it is none lost its Removed.
      // The answer's second part is its stamp, our clock's now: the member echoes the newest it got in its next
      // report, which renews our lease (GridMasterSetup::lease).
      [self](NodeReport& report) -> std::tuple<bool, std::int64_t> {
        auto& s = self->state;
        const auto now = self->clock().now();
        const std::int64_t stamp = now.time_since_epoch().count();
        auto m = s.members.find(report.node_id);
        if (m == s.members.end()) return {false, stamp};  // it left or was removed; the report was on its way
        if (report.sample.values.size() > allreduce::kMaxReplicaSample) {
          log_dropped("grid_master", s.bad_messages, "a node report with an oversized sample");
          return {true, stamp};
        }
        // Only a stamp of ours can renew it: one from the future is no answer we gave (nor one before its welcome).
        if (report.epoch == s.epoch && report.lease_stamp <= stamp &&
            report.lease_stamp > m->second.lease.time_since_epoch().count())
          m->second.lease = caf::actor_clock::time_point(caf::actor_clock::time_point::duration(report.lease_stamp));
        if (report.epoch == s.epoch && report.layout_version > m->second.acked_version) {
          if (m->second.acked_version < s.confirm_version && report.layout_version >= s.confirm_version) --s.unacked;
          m->second.acked_version = report.layout_version;
        }
        mark_due(self, report.node_id, m->second);  // if it has not had this generation's
        // The node checks its half on its reports' timer: see send_reports() in node_report.cpp.
        if (++m->second.reports % kRouteCheckEvery == 0)
          connect_directly(self, s.setup.credentials, s.setup.node_id, report.node_id, m->second.node,
                           m->second.address);
        m->second.report = std::move(report);
        m->second.heard = now;
        confirm_if_acked(self);
        return {true, stamp};
      },
      [self](silence_atom) { watch_silence(self); },
      [self](lease_atom) { watch_lease(self); },
      [self](stats_atom) -> JoinStats {
        const auto& s = self->state;
        return {s.rejected, s.stale_join_proofs, s.bad_messages};
      },
      [self](grid_view_atom) -> caf::result<GridView> {
        if (self->state.electing) return caf::make_error(caf::sec::request_receiver_down, "electing a GridMaster");
        return grid_view(self->state);
      },
  };
}

}  // namespace gridtrain::actors
