#include "actors/line_master.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <tuple>

#include "actors/dropped.hpp"
#include "allreduce/quorum.hpp"

namespace gridtrain::actors {

namespace {

using Self = caf::stateful_actor<LineMasterState>*;

constexpr int kBurstWindow = 5;  // a StartLine within this many settle times of the one before is a burst

std::uint32_t peers(const LineMasterState& s) { return static_cast<std::uint32_t>(s.line->peers.size()); }

// The silence that earns a nudge starts again now for every peer (the line was idle, or this node was stalled).
void restart_silence(LineMasterState& s, caf::actor_clock::time_point now) {
  for (auto& heard : s.heard) heard = std::max(heard, now);
}

bool timeout_mode(const LineMasterState& s) { return s.line->settings.round.quorum == allreduce::QuorumMode::timeout; }

// The advance rule: the quorum, except that timeout mode waits until the round's deadline for everyone but the
// peers gone silent or late (allreduce/peer_patience.hpp: unreported for the last rounds, until they report again;
// or reporting well after the others in most of the last rounds, until they report in time again).
bool has_advance_quorum(const LineMasterState& s, const LineMasterState::OpenRound& r) {
  if (timeout_mode(s) && !r.deadline_passed)
    return r.count == peers(s) || (r.count >= s.advance_quorum && s.patience.only_late_unheard(r.reported));
  return r.count >= s.advance_quorum;
}

// A round leaves the open ones (every peer reported it, or it was retired): when each peer reported it is what
// tells late peers (allreduce/peer_patience.hpp).
void close_round(LineMasterState& s, std::map<std::uint64_t, LineMasterState::OpenRound>::iterator it,
                 caf::actor_clock::time_point now) {
  if (timeout_mode(s))
    s.patience.round_timed(it->second.reported_us,
                           std::chrono::duration_cast<std::chrono::microseconds>(now - it->second.started).count());
  s.deadlines.remove(it->first);
  s.open.erase(it);
}

// The rounds' deadlines and the line are gone (a new line, StopLine, the node lost the cluster).
void drop_rounds(LineMasterState& s) {
  s.open.clear();
  s.deadlines.clear();
}

// Paced: the rounds the node's learner granted since we last looked, into the budget (at most k in it).
void take_grants(LineMasterState& s) {
  const std::uint64_t fresh = s.allowance->take(s.dim, s.allowance_taken);
  const std::uint64_t cap = s.line ? s.line->settings.rounds_in_flight : allreduce::kRoundsInFlightRange.max;
  s.every_steps_budget = std::min(s.every_steps_budget + fresh, cap);
}

void start_next_round(Self self) {
  auto& s = self->state;
  if (!s.line || peers(s) < 2 || !s.advance || s.settling) return;
  if (s.allowance) {
    take_grants(s);
    if (s.every_steps_budget == 0) {
      s.allowance->wait(s.dim);  // the next grant wakes us (allow_rounds_atom)
      take_grants(s);            // unless one came just now
      if (s.every_steps_budget == 0) return;
    }
    --s.every_steps_budget;
  }
  const StartLine& line = *s.line;
  const auto now = self->clock().now();
  // A line with no round open was idle, not waiting on anyone: the silence that earns a nudge starts now.
  if (s.open.empty()) restart_silence(s, now);
  if (s.last_round_start) s.round_gap = (3 * s.round_gap + (now - *s.last_round_start)) / 4;
  s.last_round_start = now;
  // Room for the new round: the oldest open one is retired; its stragglers catch up by round key.
  while (s.open.size() >= line.settings.rounds_in_flight) {
    close_round(s, s.open.begin(), now);
    ++s.retired_early;
  }
  const allreduce::RoundKey key{line.epoch, line.layout_version, line.dim, line.line, s.next_round};
  s.open.emplace(s.next_round,
                 LineMasterState::OpenRound{std::vector<std::uint8_t>(peers(s), 0), 0, false, now,
                                            std::vector<std::int64_t>(peers(s), allreduce::PeerPatience::kUnheard)});
  ++s.next_round;
  ++s.rounds_started;
  s.advance = false;
  auto message = caf::make_message(StartRound{key});
  for (const auto& peer : line.peers) self->send(peer.dimension_node, message);
  if (timeout_mode(s))
    if (auto at = s.deadlines.add(key.round, now + std::chrono::milliseconds(line.settings.round.quorum_timeout_ms)))
      set_deadline_timer(self, *at, now);
}

// After round `round` gained a report or its deadline: the next round may start; a round every peer has
// reported is closed.
void progress(Self self, std::map<std::uint64_t, LineMasterState::OpenRound>::iterator it) {
  auto& s = self->state;
  if (it->first + 1 == s.next_round && has_advance_quorum(s, it->second)) s.advance = true;
  if (it->second.count == peers(s)) close_round(s, it, self->clock().now());
  start_next_round(self);
}

// Keeps one nudge timer running while there is a line (see "Nudges" in line_master.hpp).
void arm_nudge(Self self) {
  auto& s = self->state;
  if (s.nudge_pending || !s.line) return;
  s.nudge_pending = true;
  s.nudge_due = self->clock().now() + LineMasterState::kNudgeInterval;
  self->delayed_send(self, LineMasterState::kNudgeInterval, nudge_atom::value);
}

// Sends the line, and the rounds open now, again to every peer silent on them for as long as the line's pace
// allows (at least kNudgeInterval).
void nudge_silent_peers(Self self) {
  auto& s = self->state;
  if (!s.line || s.open.empty()) return;
  const auto now = self->clock().now();
  const caf::timespan silence = std::clamp<caf::timespan>(LineMasterState::kNudgeRounds * s.round_gap,
                                                          LineMasterState::kNudgeInterval,
                                                          LineMasterState::kNudgeMaxSilence);
  caf::message line;  // made once, for the first silent peer
  for (std::size_t i = 0; i < s.heard.size(); ++i) {  // heard and nudged have one entry per peer of the line
    if (now - s.heard[i] < silence) continue;
    s.heard[i] = now;
    ++s.nudges;
    if (!s.nudged[i]) {  // logged once per peer and line: a stalled peer is nudged after every such silence
      s.nudged[i] = true;
      spdlog::info("line_master: node {:016x} has reported no round of line {} (dim {}, layout version {}) for {} ms; "
                   "sending it the line again until it does",
                   s.line->peers[i].node_id, s.line->line, s.line->dim, s.line->layout_version,
                   std::chrono::duration_cast<std::chrono::milliseconds>(silence).count());
    }
    if (line.empty()) line = caf::make_message(*s.line);
    const caf::actor& peer = s.line->peers[i].dimension_node;
    self->send(peer, line);
    for (const auto& [round, open] : s.open) {
      if (open.reported[i]) continue;
      self->send(peer, StartRound{allreduce::RoundKey{s.line->epoch, s.line->layout_version, s.line->dim,
                                                      s.line->line, round}});
    }
  }
}

// A StartLine came: hold the first round if it came within 5·settle of the one before (see "Settling").
void settle_after_start_line(Self self) {
  auto& s = self->state;
  const auto now = self->clock().now();
  const bool burst = s.settle.count() > 0 && s.last_start_line && now - *s.last_start_line < kBurstWindow * s.settle;
  s.last_start_line = now;
  s.settling = burst;
  if (!burst) return;
  ++s.settle_generation;
  self->delayed_send(self, s.settle, settle_atom::value, s.settle_generation);
}

// A StartLine from the GridMaster: this node masters the line now (a newer version restarts it).
void take_line(Self self, StartLine& line) {
  auto& s = self->state;
  if (line.dim != s.dim || line.peers.empty()) {
    log_dropped("line_master", s.bad_messages, "a StartLine for another dim, or with no peers");
    return;
  }
  if (s.line && std::tie(line.epoch, line.layout_version) < std::tie(s.line->epoch, s.line->layout_version)) {
    ++s.stale;
    return;
  }
  line.line_master = caf::actor_cast<caf::actor>(self);
  s.line = std::move(line);
  s.advance_quorum = allreduce::quorum(s.line->settings.round.advance_threshold, peers(s));
  s.next_round = 0;  // rounds are numbered per layout version: the key tells them apart
  drop_rounds(s);
  s.advance = true;
  s.heard.assign(peers(s), self->clock().now());
  s.patience = allreduce::PeerPatience(peers(s));
  s.nudged.assign(peers(s), false);
  s.round_gap = caf::timespan{0};
  s.last_round_start.reset();
  arm_nudge(self);
  auto message = caf::make_message(*s.line);
  for (const auto& peer : s.line->peers) self->send(peer.dimension_node, message);
  settle_after_start_line(self);
  start_next_round(self);
}

// A peer's report that it completed a round: counted once, timed for the patience, and the round may advance.
void count_report(Self self, const RoundDone& done) {
  auto& s = self->state;
  if (!s.line || done.key.epoch != s.line->epoch || done.key.layout_version != s.line->layout_version ||
      done.key.dim != s.line->dim || done.key.line != s.line->line) {
    ++s.stale;
    return;
  }
  // Any report of this line, a late one included, shows the peer holds the line: no nudge for it.
  if (done.from < s.heard.size()) s.heard[done.from] = self->clock().now();
  auto it = s.open.find(done.key.round);
  if (it == s.open.end()) return;  // closed (a duplicate) or retired (a straggler's late report)
  if (done.from >= it->second.reported.size()) {
    log_dropped("line_master", s.bad_messages, "a RoundDone from a peer index outside the line");
    return;
  }
  if (it->second.reported[done.from]) return;
  it->second.reported[done.from] = 1;
  it->second.reported_us[done.from] =
      std::chrono::duration_cast<std::chrono::microseconds>(self->clock().now() - it->second.started).count();
  s.patience.heard(done.from);
  ++it->second.count;
  progress(self, it);
}

}  // namespace

caf::behavior line_master(caf::stateful_actor<LineMasterState>* self, LineMasterSetup setup) {
  self->state.dim = setup.dim;
  self->state.settle = setup.settle;
  self->state.allowance = std::move(setup.allowance);
  drop_unexpected(self);
  return {
      [self](StartLine& line) { take_line(self, line); },
      [self](settle_atom, std::uint64_t generation) {
        auto& s = self->state;
        if (generation != s.settle_generation || !s.settling) return;  // a newer StartLine restarted the wait
        s.settling = false;
        start_next_round(self);
      },
      [self](nudge_atom) {
        auto& s = self->state;
        s.nudge_pending = false;
        const auto now = self->clock().now();
        if (now - s.nudge_due > LineMasterState::kNudgeInterval)
          restart_silence(s, now);  // we were stalled, not they
        else
          nudge_silent_peers(self);
        arm_nudge(self);  // only while there is a line: a dormant LineMaster keeps no timer
      },
      [self](const StopLine& stop) {
        auto& s = self->state;
        if (!s.line || stop.dim != s.line->dim || stop.line != s.line->line ||
            std::tie(stop.epoch, stop.layout_version) <= std::tie(s.line->epoch, s.line->layout_version))
          return;
        s.line.reset();
        drop_rounds(s);
      },
      [self](const RoundDone& done) { count_report(self, done); },
      [self](deadline_atom, std::int64_t at) {
        auto& s = self->state;
        for (const std::uint64_t round : due_deadlines(self, s.deadlines, at)) {
          auto it = s.open.find(round);
          if (!s.line || it == s.open.end()) continue;
          it->second.deadline_passed = true;
          // Who had not reported it by its deadline: a peer that misses the last rounds goes silent.
          s.patience.round_done(it->second.reported);
          progress(self, it);
        }
      },
      [self](lost_atom) {
        // The node lost the cluster: whatever line it mastered is another master's now, or will be.
        self->state.line.reset();
        drop_rounds(self->state);
      },
      [self](lost_atom, std::uint64_t epoch, std::uint64_t layout_version) {
        // The node was welcomed at this version: a line it masters of an older one is not the cluster's.
        auto& s = self->state;
        if (!s.line || std::tie(s.line->epoch, s.line->layout_version) >= std::tie(epoch, layout_version)) return;
        s.line.reset();
        drop_rounds(s);
      },
      [self](stats_atom) { return self->state.rounds_started; },
      [self](allow_rounds_atom) {
        if (!self->state.allowance) return;  // not paced: there is no limit to raise
        take_grants(self->state);
        start_next_round(self);
      },
  };
}

}  // namespace gridtrain::actors
