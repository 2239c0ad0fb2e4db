// Node: its phases, each a behaviour of its own, and the moves between them (actors/node.hpp). The rest of its
// work is in node_join.cpp, node_failover.cpp, node_report.cpp and node_warm_start.cpp (actors/node_internal.hpp).
//
//   begin_atom: through a seed, or with a GridMaster of its own (bootstrap)
//        |
//        v
//   +---------+  Welcome  +--------+  Removed; the GridMaster's down_msg or silence;  +-----------+  walks: votes,
//   | joining |---------->| member |------------------------------------------------->| rejoining |--+ stands as
//   +---------+           +--------+  a report it does not count (lose_cluster)       +-----------+<-+ successor,
//     |    |                |    ^                                                     |    |          steps down
//     |    |                |    +------------------------ Welcome --------------------+    |
//     |    | stop_atom      | stop_atom: Leave                                              | stop_atom
//     |    v                v                                                               v
//     |   +-------------------------------------------------------------------------------------------+
//     |   | leaving: ends once the GridMaster answers the Leave (from member), or at once (from others) |
//     |   +-------------------------------------------------------------------------------------------+
//     v
//   ends (conclude): a Reject, no seed lets it in, or the join timeout
//
// Rejoining covers the election: standing as the GridMaster's successor (NodeState::candidate) and stepping down
// are steps of its walks (node_failover.cpp), and a Welcome ends them. enter() moves the node: it sets
// NodeState::phase (for the stats and the tests), the phase's part of the down handler and its behaviour.
// Callbacks of requests sent in one phase may come in another, and check NodeState::phase.
// Every phase answers alike what common_handlers() holds (the requests: stats, members, grid view...). A message
// that only other phases handle gets what off_phase_handlers() says, what a node in no cluster does with it:
// ignored, or refused (a Join, warm_start_atom). Anything else is dropped and counted (drop_unexpected).

#include "actors/node.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <compare>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "actors/dimension_node.hpp"
#include "actors/direct_connection.hpp"
#include "actors/dropped.hpp"
#include "actors/line_master.hpp"
#include "actors/node_internal.hpp"

namespace gridtrain::actors {

namespace node_internal {

namespace {

void enter(Self self, NodePhase phase);
void member_left(Self self, const Leave& leave);

// -- what every phase does alike ----------------------------------------------------------------------------------

// Paced by the learner: the LineMasters that wait for a grant (RoundAllowance, a bit per dimension) take it now.
void wake_line_masters(Self self, std::uint8_t waiting) {
  const auto& masters = self->state.line_masters;
  for (std::size_t d = 0; d < masters.size(); ++d)
    if (waiting & (1u << d)) self->send(masters[d], allow_rounds_atom::value);
}

// Keeps `grid` unless it is older than the GridState held; says how it compares with that.
std::strong_ordering keep_grid_state(Self self, const GridState& grid) {
  auto& s = self->state;
  // The same version again carries news too: its confirmed members (GridState::quorum_members).
  const GridState* held = s.grid();
  const auto order = held ? std::tie(grid.epoch, grid.layout_version) <=> std::tie(held->epoch, held->layout_version)
                          : std::strong_ordering::greater;
  if (order < 0) return order;
  // Only a layout that lost a dimension or came from another epoch (a successor's) can leave a line behind:
  // a GridMaster that stays stops the lines it changes. (A successor sends its state before its Welcome: a
  // node rejoining under it takes this too.)
  if (order > 0 && (!held || grid.dims < held->dims || grid.epoch != held->epoch)) end_lines_outside(self, grid);
  s.grid_message = self->current_mailbox_element()->move_content_to_message();  // no copy (node.hpp)
  return order;
}

// stats_atom: its DimensionNodes' counters, asked for now, and what the GridMaster it hosts turned away.
caf::typed_response_promise<NodeStats> answer_stats(Self self) {
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
}

// The GridMaster's view of the grid, or, with no GridMaster, `no_cluster` as the error.
caf::result<caf::message> answer_grid_view(Self self, const char* no_cluster) {
  if (!self->state.grid_master) return caf::make_error(caf::sec::request_receiver_down, no_cluster);
  return self->delegate(self->state.grid_master, grid_view_atom::value);
}

caf::message_handler common_handlers(Self self) {
  return {
      [self](begin_atom, std::string& address) { begin(self, std::move(address)); },
      [self](const GridState& grid) { keep_grid_state(self, grid); },
      [self](const Leave& leave) {
        member_left(self, leave);
        return left_atom::value;
      },
      [self](stats_atom) { return answer_stats(self); },
      [self](grid_view_atom) { return answer_grid_view(self, "not in a cluster"); },
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
      [self](warm_params_atom, std::uint64_t offset, std::uint64_t count) { return warm_params(self, offset, count); },
      [self](allow_rounds_atom, std::uint8_t waiting) { wake_line_masters(self, waiting); },
      [self](allow_rounds_atom, std::uint32_t dim, std::uint64_t rounds) {
        const auto& allowance = self->state.setup.allowance;
        if (allowance && dim < kDimsOffered) wake_line_masters(self, allowance->grant(dim, rounds));
      },
  };
}

// -- what a phase does with the messages of other phases ----------------------------------------------------------

// The JoinChallenge for a Join this node sent, taken once (a replayed Join's challenge reaches a node that ignores
// it): the GridMaster that sent it, and whether the Join was a vote. Nullopt for any other.
struct Challenge {
  caf::actor grid_master;
  bool vote = false;
};
std::optional<Challenge> take_challenge(Self self, const JoinChallenge& c) {
  auto& s = self->state;
  const auto pending = s.pending_joins.find(c.request);
  const auto grid_master = caf::actor_cast<caf::actor>(self->current_sender());
  if (c.node_id != s.setup.node_id || c.nonce == 0 || pending == s.pending_joins.end() || !grid_master)
    return std::nullopt;
  const bool vote = pending->second;
  s.pending_joins.erase(pending);
  return Challenge{grid_master, vote};
}

// A Join to a node that is no member: passed to the successor it stands with, or else refused.
void pass_on_or_refuse(Self self, const Join& join) {
  auto& s = self->state;
  if (s.candidate)
    pass_on_join(self, s.candidate, join);
  else if (join.node)
    self->send(join.node, Reject{join.node_id, kNotAMember, true});
}

caf::message_handler off_phase_handlers(Self self) {
  return {
      [](join_timeout_atom) {},
      [](seed_retry_atom) {},
      [](const Welcome&) {},
      [](const Reject&) {},
      [](const Removed&) {},
      [](walk_atom, std::uint64_t, bool) {},
      [](tick_atom, std::uint64_t) {},
      [self](const JoinChallenge& c) { take_challenge(self, c); },  // taken, and not answered: it is no joiner now
      [self](const Join& join) { pass_on_or_refuse(self, join); },
      [](warm_start_atom) -> caf::result<std::uint64_t> {
        return caf::make_error(caf::sec::request_receiver_down, "warm start: the node is not a member");
      },
  };
}

// A phase's behaviour: its own handlers first, then the common ones, then those of the other phases.
caf::behavior phase_behavior(Self self, caf::message_handler own) {
  return own.or_else(common_handlers(self)).or_else(off_phase_handlers(self));
}

// -- the phases -----------------------------------------------------------------------------------------------------

// Joining or rejoining, welcomed by the GridMaster `w.grid_master`: the node is a member.
void welcomed(Self self, const Welcome& w, bool rejoined) {
  auto& s = self->state;
  if (w.node_id != s.setup.node_id || !w.grid_master) return;
  if (s.candidate && s.candidate != w.grid_master) abandon_candidacy(self, "the cluster's GridMaster let it in");
  s.candidate = nullptr;  // or it is the GridMaster now
  s.voted_for = nullptr;
  s.left_members.clear();
  forget_join_holder(self);
  enter(self, NodePhase::member);
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
  s.lease_stamp = 0;  // a stamp is good only with the GridMaster that gave it
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
}

// stop_atom while the node is no member (joining, or rejoining): it ends at once.
void stop_unwelcomed(Self self) {
  enter(self, NodePhase::leaving);
  conclude(self, JoinResult::stopped, "stopped before the join was answered");
  self->quit(caf::exit_reason::user_shutdown);
}

// A node leaving with no GridMaster to take its Leave (it lost it, or the GridMaster did not answer): it tells every
// member of its last state it has a handle of, each of which records it and passes it on to the successor it stands
// with (member_left), then ends: at once where all answered, else after kLeaveNoticeWait. A candidate then waits
// for no vote of it: the last member left of a cluster whose other members all finished could otherwise never
// gather a majority again (see election_leave in grid_master.cpp).
void tell_members_and_end(Self self) {
  constexpr auto kLeaveNoticeWait = std::chrono::seconds(1);
  auto& s = self->state;
  const GridState* last = s.grid();
  std::vector<caf::actor> members;
  if (last)
    for (const MemberState& m : last->members)
      if (m.node && m.place.node_id != s.setup.node_id) members.push_back(m.node);
  if (members.empty()) return stop_unwelcomed(self);
  spdlog::info("node {:016x}: leaving; it tells the {} members of epoch {} it knows", s.setup.node_id, members.size(),
               last->epoch);
  const Leave leave{s.setup.node_id, last->epoch};
  auto waiting = std::make_shared<std::size_t>(members.size());
  auto answered = [self, waiting] {
    if (--*waiting == 0) stop_unwelcomed(self);
  };
  for (const caf::actor& member : members)
    self->request(member, kLeaveNoticeWait, leave)
        .then([answered](left_atom) { answered(); }, [answered](caf::error&) { answered(); });
}

// A member of our last state says it leaves, having no GridMaster to tell: its vote will not come, so our candidacy,
// now or later, does not count it; the successor we stand with, or the GridMaster we follow, is told.
void member_left(Self self, const Leave& leave) {
  auto& s = self->state;
  if (!s.grid() || leave.epoch != s.grid()->epoch || leave.node_id == s.setup.node_id) return;
  if (std::find(s.left_members.begin(), s.left_members.end(), leave.node_id) == s.left_members.end())
    s.left_members.push_back(leave.node_id);
  spdlog::info("node {:016x}: member {:016x} of epoch {} left", s.setup.node_id, leave.node_id, leave.epoch);
  const caf::actor& to = s.candidate ? s.candidate : s.phase == NodePhase::member ? s.grid_master : caf::actor();
  if (to) self->request(to, std::chrono::seconds(1), leave).then([](left_atom) {}, [](caf::error&) {});
}

caf::behavior joining(Self self) {
  return phase_behavior(self, {
      [self](join_timeout_atom) {
        auto& s = self->state;
        const std::string within = std::to_string(s.setup.join_timeout.count()) + " ms";
        const std::string& why = s.seed_failures.empty() ? s.seed_failures_before : s.seed_failures;
        conclude(self, JoinResult::unreachable,
                 why.empty() ? "no answer from the seed within " + within
                             : "no seed let it in within " + within + ": " + why);
      },
      [self](seed_retry_atom) { ask_next_seed(self, ""); },
      [self](const Welcome& w) { welcomed(self, w, false); },
      [self](const Reject& r) {
        auto& s = self->state;
        if (r.node_id != s.setup.node_id) return;
        if (!r.not_a_member) return conclude(self, JoinResult::rejected, r.reason);
        // "Not a member" is never the cluster's answer: that seed may be one a moment later. One that comes while
        // the joiner waits to ask its seeds again answers an earlier pass (held up on the way): the next pass asks.
        if (s.seed_next == 0) return;
        s.seed_said_retry = true;
        ask_next_seed(self, seed_name(s, s.seed_next - 1) + ": " + r.reason);
      },
      [self](const JoinChallenge& c) {
        // The answer goes to the GridMaster itself; the first Join may have come through a seed.
        const auto taken = take_challenge(self, c);
        if (!taken) return;
        watch_join_holder(self, taken->grid_master, "the GridMaster");
        self->send(taken->grid_master, make_join(self, c.request, c.nonce, taken->vote));
      },
      [self](stop_atom) { stop_unwelcomed(self); },
  });
}

void joining_down(Self self, const caf::down_msg& down) {
  auto& s = self->state;
  if (!s.join_holder || down.source != s.join_holder) return;
  // Our Join died with it: ask again (the next seed now; the list again after a pause, until the timeout).
  s.join_holder = nullptr;
  s.seed_said_retry = true;
  ask_next_seed(self, s.join_holder_name + " went down before it answered");
}

caf::behavior member(Self self) {
  return phase_behavior(self, {
      [self](const Removed& r) {
        auto& s = self->state;
        if (r.node_id != s.setup.node_id || r.epoch != s.epoch) return;
        lose_cluster(self,
                     "the GridMaster took it out of the grid (layout version " + std::to_string(r.layout_version) + ")",
                     false);
      },
      [self](tick_atom, std::uint64_t generation) { send_reports(self, generation); },
      [self](const GridState& grid) {
        // A newer layout is acknowledged at once, not at the next report: the members are confirmed only once
        // every one holds it, and a failover counts only confirmed members (docs/design.md, "Membership at scale").
        auto& s = self->state;
        if (keep_grid_state(self, grid) > 0 && s.grid_master) report(self, s.report_generation);
      },
      [self](const Join& join) {
        // We are the joiner's seed: the GridMaster decides, and answers the joiner itself.
        auto& s = self->state;
        if (s.grid_master)
          pass_on_join(self, s.grid_master, join);
        else
          pass_on_or_refuse(self, join);
      },
      [self](warm_start_atom) -> caf::result<std::uint64_t> {
        auto promise = self->make_response_promise<std::uint64_t>();
        warm_start(self, [self, promise](Result<std::uint64_t> copied) mutable {
          if (copied)
            promise.deliver(copied.value());
          else
            promise.deliver(caf::make_error(caf::sec::runtime_error, copied.error().message));
        });
        return promise;
      },
      [self](stop_atom) {
        auto& s = self->state;
        enter(self, NodePhase::leaving);
        spdlog::info("node {:016x}: leaving", s.setup.node_id);
        self->request(s.grid_master, std::chrono::seconds(3), Leave{s.setup.node_id, s.epoch})
            .then([self](left_atom) { self->quit(caf::exit_reason::user_shutdown); },
                  [self](caf::error&) { tell_members_and_end(self); });  // it died as we left, say
      },
  });
}

void member_down(Self self, const caf::down_msg& down) {
  auto& s = self->state;
  if (!s.grid_master || down.source != s.grid_master.address()) return;
  answer_passed_joins(self);
  // A GridMaster that steps down ends normally: CAF renders that reason as "none". Only a lost connection leaves
  // it perhaps alive, and leading, on the other side of a cut: then the lease is waited out.
  const bool unsure = down.reason == caf::exit_reason::remote_link_unreachable &&
                      (down.source.node() != self->node() || self->state.setup.lease_for_local_grid_master);
  // The GridMaster's node left cleanly: at the end of a run, every time its node finishes before the others.
  // Nothing failed, so it is no warning.
  if (down.reason == caf::exit_reason::user_shutdown)
    return lose_cluster(self, "its GridMaster's node left (it finished, or was stopped)", true, true, false);
  lose_cluster(self,
               "lost contact with the GridMaster (" +
                   (down.reason ? self->system().render(down.reason) : std::string("it stepped down")) + ")",
               true, !unsure);
}

// `grid` with the actor handles of every member but `keep_a` and `keep_b` left out (their places and addresses
// stay). Between two nodes that lost their GridMaster, handles of a third node, perhaps the dead one, must not
// travel: CAF 0.17 takes a handle of a node it has no connection to, received from a peer, as a route to that node
// through the peer, and it never forgets such a route. Two survivors that sent each other the dead node's handles
// each routed it through the other, and the monitor messages their new proxies sent it went back and forth between
// them for good: each process's CAF thread spent a quarter of a core on it, which the CPU share counted as
// averaging, so their lines ran no round again (seen after kills of the GridMaster's node, 4 of 8 runs beside
// other tests). The walk needs only the places and addresses; a handle it lacks it dials for.
GridState without_third_party_handles(const GridState& grid, std::uint64_t keep_a, std::uint64_t keep_b) {
  GridState out = grid;
  for (MemberState& m : out.members) {
    if (m.place.node_id == keep_a || m.place.node_id == keep_b) continue;
    m.node = nullptr;
    m.dimension_nodes.assign(m.dimension_nodes.size(), nullptr);
    m.line_masters.assign(m.line_masters.size(), nullptr);
  }
  return out;
}

// A Join to a node that lost the cluster: passed to the successor it stands with; else held, if it is a vote that
// may make this node the successor, or refused.
void rejoining_join(Self self, const Join& join) {
  auto& s = self->state;
  if (s.candidate) return pass_on_join(self, s.candidate, join);
  if (s.lines_kept && join.vote && join.node && s.early_votes.size() < kMaxWaitingJoins)
    s.early_votes.push_back(join);
  else if (join.node)
    self->send(join.node, Reject{join.node_id, kNotAMember, true});
  // A member of our GridState asks, and both of us lost the GridMaster: our GridState may name members it
  // never heard of, among them one that stands below it, whose candidacy waits for its vote. Without this,
  // two candidates each waited for a vote the other's voter held: 2 confirmed members, the one that stood
  // first not knowing the third that joined last (the other voted for it), and no cluster formed again (a
  // 5 Mbit/s link, before warm starts came in slices sized by the link). A node that is no member of it
  // (a new joiner using us as its seed) gets nothing: it takes a GridState from its GridMaster.
  if (join.node && s.grid() &&
      std::any_of(s.grid()->members.begin(), s.grid()->members.end(),
                  [&](const MemberState& m) { return m.place.node_id == join.node_id; }))
    self->send(join.node, without_third_party_handles(*s.grid(), s.setup.node_id, join.node_id));
}

caf::behavior rejoining(Self self) {
  return phase_behavior(self, {
      [self](const Welcome& w) { welcomed(self, w, true); },
      [self](const Reject& r) {
        // The GridMaster may not have noticed yet that we were gone ("already in the cluster"), or the member
        // asked has lost it too (not_a_member); the walk asks again.
        auto& s = self->state;
        if (r.node_id == s.setup.node_id && !r.not_a_member)
          spdlog::info("node {:016x}: not let back in yet: {}", s.setup.node_id, r.reason);
      },
      [self](walk_atom, std::uint64_t token, bool new_walk) {
        if (token != self->state.walk_token) return;
        if (new_walk) return start_walk(self);
        walk_step(self, token);
      },
      [self](lease_probe_atom, std::uint64_t generation, bool nothing_listens) {
        lease_probed(self, generation, nothing_listens);
      },
      [self](const JoinChallenge& c) {
        // The answer goes to the GridMaster itself; the first Join may have come through a member.
        if (const auto taken = take_challenge(self, c))
          self->send(taken->grid_master, make_join(self, c.request, c.nonce, taken->vote));
      },
      [self](const Join& join) { rejoining_join(self, join); },
      [self](grid_view_atom) {
        return answer_grid_view(self, "not in a cluster now: it lost its GridMaster, and is rejoining or electing one");
      },
      [self](stop_atom) {
        enter(self, NodePhase::leaving);
        tell_members_and_end(self);
      },
  });
}

caf::behavior leaving(Self self) {
  return phase_behavior(self, {
      [](stop_atom) {},  // it is leaving already
  });
}

// The node in `phase`: its phase, what it does when an actor it monitors goes down (besides the warm starts, which
// every phase watches), and its behaviour, returned.
caf::behavior phase_entered(Self self, NodePhase phase) {
  auto& s = self->state;
  s.phase = phase;
  s.on_down = nullptr;
  switch (phase) {
    case NodePhase::joining:
      s.on_down = [self](const caf::down_msg& down) { joining_down(self, down); };
      return joining(self);
    case NodePhase::member:
      s.on_down = [self](const caf::down_msg& down) { member_down(self, down); };
      return member(self);
    case NodePhase::rejoining:
      return rejoining(self);
    case NodePhase::leaving:
      break;
  }
  return leaving(self);
}

// Moves the node into `phase`.
void enter(Self self, NodePhase phase) { self->become(phase_entered(self, phase)); }

}  // namespace

void lose_cluster(Self self, const std::string& why, bool keep_lines, bool grid_master_ended, bool warn) {
  auto& s = self->state;
  spdlog::log(warn ? spdlog::level::warn : spdlog::level::info, "node {:016x}: {}; {}", s.setup.node_id, why,
              keep_lines ? "its lines go on while it finds the cluster's GridMaster or elects one"
                         : "dropping its lines and rejoining");
  enter(self, NodePhase::rejoining);
  const bool local =
      s.grid_master && s.grid_master.node() == self->node() && !s.setup.lease_for_local_grid_master;
  if (s.grid_master) self->demonitor(s.grid_master);
  s.grid_master = nullptr;
  ++s.report_generation;
  s.lines_kept = keep_lines;
  if (!keep_lines) drop_lines(self);
  // Its vote waits for the lease it promised the GridMaster (GridMasterSetup::lease), unless the GridMaster
  // ended for sure; meanwhile its walk asks plain Joins, which a live cluster answers by letting it back in.
  s.may_vote_at = self->clock().now();
  if (!grid_master_ended && !local) {
    s.may_vote_at = std::max(s.may_vote_at,
                             s.grid_master_heard + lease_wait(s.cluster_config.value_or(s.setup.config)));
    // A lost connection (the lines kept) may be a death; a GridMaster that took it out is alive.
    if (keep_lines && s.may_vote_at > self->clock().now()) probe_lost_grid_master(self);
  }
  s.walks = 0;
  start_walk(self);
}

}  // namespace node_internal

caf::behavior node(caf::stateful_actor<NodeState>* self, NodeSetup setup) {
  using namespace node_internal;
  auto& s = self->state;
  s.setup = std::move(setup);
  if (s.setup.data && s.setup.data_routes) {
    s.data = std::move(s.setup.data);
    s.data_routes = std::move(s.setup.data_routes);
  } else {
    s.data = add_own_endpoint(self);
  }
  for (std::uint32_t d = 0; d < kDimsOffered; ++d) {
    s.dimension_nodes.push_back(
        self->spawn<caf::linked>(dimension_node,
                                 DimensionNodeSetup{d, s.setup.node_id, s.setup.store, s.data, s.setup.credentials}));
    s.line_masters.push_back(self->spawn<caf::linked>(
        line_master, LineMasterSetup{.dim = d,
                                     .allowance = s.setup.allowance,
                                     .settle = std::chrono::milliseconds(s.setup.config.allreduce.line_settle_ms)}));
  }
  *s.data_routes = s.dimension_nodes;
  drop_unexpected(self);
  self->set_down_handler([self](caf::down_msg& down) {
    warm_start_peer_died(self, down.source);
    // A copy: the phase's handler may move the node into another phase, which replaces it.
    if (const auto phase_down = self->state.on_down) phase_down(down);
  });
  return phase_entered(self, NodePhase::joining);
}

}  // namespace gridtrain::actors
