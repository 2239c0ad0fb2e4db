#include "actors/worker.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <span>

#include "actors/dropped.hpp"
#include "allreduce/elastic_update.hpp"

namespace gridtrain::actors {

namespace {

using Self = caf::stateful_actor<WorkerState>*;

enum class LineOrder { same, other_version, foreign };

LineOrder line_order(const allreduce::RoundKey& key, const StartLine& line) {
  const bool same_version = key.epoch == line.epoch && key.layout_version == line.layout_version;
  if (key.dim != line.dim || (same_version && key.line != line.line)) return LineOrder::foreign;
  return same_version ? LineOrder::same : LineOrder::other_version;
}

void publish_stats(Self self) {
  auto& s = self->state;
  const auto& a = s.stats;
  const auto& b = s.published;
  if (a.rounds_done == b.rounds_done && a.caught_up == b.caught_up && a.abandoned == b.abandoned &&
      a.stale_dropped == b.stale_dropped && a.malformed == b.malformed && a.quorum_shortfalls == b.quorum_shortfalls)
    return;
  s.published = a;
  if (s.setup.parent) self->send(s.setup.parent, s.setup.slot, a);
}

void drop(Self self, bool stale, const char* what) {
  auto& s = self->state;
  if (stale) {
    ++s.stats.stale_dropped;  // routine after a catch-up or a layout change: counted, not logged
  } else {
    log_dropped("worker", s.stats.malformed, what);
  }
}

// Notes that the worker runs now; true while it sits out a stall (see WorkerSetup::stall_limit). The ticks keep
// `last_ran` fresh while there is a line, so a long gap means the worker itself did not run: a quiet line is no
// stall.
bool sitting_out(Self self) {
  auto& s = self->state;
  if (s.setup.stall_limit.count() == 0) return false;
  const auto now = self->clock().now();
  const auto gap = now - s.last_ran;
  s.last_ran = now;
  if (s.line && gap > s.setup.stall_limit) {
    if (s.round && !s.done) ++s.stats.abandoned;
    s.round.reset();
    s.done = false;
    s.sit_out_until = now + s.setup.stall_limit;
    // One line per dimension: the other slots stalled alike.
    spdlog::log(s.setup.slot == 0 ? spdlog::level::info : spdlog::level::debug,
                "worker dim {} slot {}: did not run for {} ms, longer than the connection timeout; it sits out {} ms "
                "while its node finds out what is left of its line",
                s.setup.dim, s.setup.slot, std::chrono::duration_cast<std::chrono::milliseconds>(gap).count(),
                s.setup.stall_limit.count());
  }
  return now < s.sit_out_until;
}

// For a round message: true, and the message dropped and counted, while the worker sits out a stall.
bool dropped_sitting_out(Self self) {
  if (!sitting_out(self)) return false;
  drop(self, true, "a round message while sitting out a stall");
  return true;
}

void tick_while_in_line(Self self) {
  auto& s = self->state;
  if (s.setup.stall_limit.count() == 0 || !s.line || s.ticking) return;
  s.ticking = true;
  self->delayed_send(self, s.setup.stall_limit / 4, tick_atom::value);
}

// Sends what the Round asks for. Round::reduce lists one chunk's mean for every other peer in a row: that is
// one message, shared by all receivers, not p - 1 copies.
void send_all(Self self, std::span<const allreduce::Send> sends) {
  auto& s = self->state;
  const allreduce::RoundKey key = s.round->key();
  for (std::size_t i = 0; i < sends.size();) {
    const allreduce::Send& x = sends[i];
    FloatPayload data{{x.data.begin(), x.data.end()}};
    if (x.kind == allreduce::SendKind::scatter) {
      self->send(s.line->peers[x.to].dimension_node, ScatterChunk{key, s.self_index, x.offset, std::move(data)});
      ++i;
      continue;
    }
    auto message = caf::make_message(ReducedChunk{key, s.self_index, x.offset, x.count, std::move(data)});
    for (; i < sends.size() && sends[i].kind == allreduce::SendKind::reduced && sends[i].offset == x.offset; ++i)
      self->send(s.line->peers[sends[i].to].dimension_node, message);
  }
}

// Algorithm 1, line 17, per tensor under its lock; then tell the LineMaster.
void complete_if_done(Self self) {
  auto& s = self->state;
  if (!s.round || s.done || !s.round->complete()) return;
  s.done = true;
  const auto alpha = static_cast<float>(s.line->settings.round.elastic_rate);
  const allreduce::Round& round = *s.round;
  s.setup.store->update_each([&](std::size_t offset, std::span<float> values) {
    allreduce::elastic_update(values, offset, round, alpha);
  });
  const auto& c = round.counters();
  ++s.stats.rounds_done;
  if (c.short_reductions > 0 || c.missing_at_completion > 0) ++s.stats.quorum_shortfalls;
  self->send(s.line->line_master,
             RoundDone{round.key(), s.self_index, static_cast<std::uint32_t>(c.missing_at_completion)});
}

// A newer round of this slot has shown up: complete ours with what we have, so that it cannot hold us up.
void catch_up(Self self) {
  auto& s = self->state;
  if (!s.round) return;
  if (!s.done) ++s.stats.caught_up;
  send_all(self, s.round->finish());
  complete_if_done(self);
}

// 1. Fetch, 2. scatter; in timeout mode, arm the quorum deadline.
void start_round(Self self, const allreduce::RoundKey& key) {
  auto& s = self->state;
  const allreduce::RoundConfig& config = s.line->settings.round;
  s.round.reset();
  s.done = false;
  auto round = allreduce::Round::create(key, s.setup.store->size(), static_cast<std::uint32_t>(s.line->peers.size()),
                                        s.self_index, config);
  if (!round) {
    // DimensionNode checked the settings; this is a last line of defence against a broken StartLine.
    spdlog::error("worker dim {} slot {}: cannot run round {}: {}", s.setup.dim, s.setup.slot, key.round,
                  round.error().to_string());
    return;
  }
  s.round.emplace(std::move(round).value());
  s.setup.store->fetch(s.round->send_buffer());
  send_all(self, s.round->scatter());
  if (config.quorum == allreduce::QuorumMode::timeout)
    self->delayed_send(self, std::chrono::milliseconds(config.quorum_timeout_ms), deadline_atom::value,
                       key.layout_version, key.round);
  complete_if_done(self);
}

// Makes `key`'s round the current one if it is ours or newer; false (and counted) if it is to be dropped.
bool enter_round(Self self, const allreduce::RoundKey& key) {
  auto& s = self->state;
  // DimensionNode routes only the current line's messages here; these are the leftovers of a line change.
  const LineOrder order = s.line ? line_order(key, *s.line) : LineOrder::other_version;
  if (order != LineOrder::same) {
    drop(self, order == LineOrder::other_version, "a message for another dimension or line");
    return false;
  }
  if (s.round && key.round == s.round->key().round) return true;
  if (s.round && key.round < s.round->key().round) {
    drop(self, true, "a message of an older round");
    return false;
  }
  catch_up(self);
  start_round(self, key);
  return s.round.has_value();
}

void handle_verdict(Self self, allreduce::Verdict verdict, std::span<const allreduce::Send> sends) {
  using allreduce::Verdict;
  switch (verdict) {
    case Verdict::accepted: send_all(self, sends); complete_if_done(self); break;
    case Verdict::duplicate:
    case Verdict::late: break;  // counted by the Round; normal under quorum
    case Verdict::stale: drop(self, true, "a stale chunk"); break;
    case Verdict::newer: break;  // enter_round() already moved to the message's round
    case Verdict::malformed: drop(self, false, "a malformed chunk (wrong offset, length, sender or count)"); break;
  }
}

}  // namespace

caf::behavior worker(caf::stateful_actor<WorkerState>* self, WorkerSetup setup) {
  self->state.setup = std::move(setup);
  drop_unexpected(self);
  return {
      [self](const StartLine& line) {
        auto& s = self->state;
        sitting_out(self);
        s.sit_out_until = {};  // a new line: new peers, over connections that work
        // A round of the old line cannot finish any more: its peers moved on. Drop it without an update.
        if (s.round && !s.done) ++s.stats.abandoned;
        s.round.reset();
        s.done = false;
        s.line = line;
        const auto me = std::find_if(line.peers.begin(), line.peers.end(),
                                     [&](const LinePeer& p) { return p.node_id == s.setup.node_id; });
        if (me == line.peers.end() || line.settings.model_floats != s.setup.store->size()) {
          s.line.reset();  // DimensionNode checks this; never run a round on a line we cannot be in
        } else {
          s.self_index = static_cast<std::uint32_t>(me - line.peers.begin());
        }
        tick_while_in_line(self);
        publish_stats(self);
      },
      [self](const StartRound& m) {
        if (!dropped_sitting_out(self)) enter_round(self, m.key);
        publish_stats(self);
      },
      [self](const ScatterChunk& m) {
        if (!dropped_sitting_out(self) && enter_round(self, m.key)) {
          const auto outcome = self->state.round->on_scatter({m.key, m.from, m.offset, m.data.values});
          handle_verdict(self, outcome.verdict, outcome.sends);
        }
        publish_stats(self);
      },
      [self](const ReducedChunk& m) {
        if (!dropped_sitting_out(self) && enter_round(self, m.key)) {
          const auto outcome = self->state.round->on_reduced({m.key, m.from, m.offset, m.count, m.data.values});
          handle_verdict(self, outcome.verdict, outcome.sends);
        }
        publish_stats(self);
      },
      [self](deadline_atom, std::uint64_t layout_version, std::uint64_t round) {
        auto& s = self->state;
        if (sitting_out(self)) return;
        if (!s.round || s.round->key().layout_version != layout_version || s.round->key().round != round) return;
        send_all(self, s.round->deadline_passed());
        complete_if_done(self);
        publish_stats(self);
      },
      [self](tick_atom) {
        auto& s = self->state;
        s.ticking = false;
        sitting_out(self);
        tick_while_in_line(self);
        publish_stats(self);
      },
      [self](lost_atom) {
        // The node lost the cluster: the line is gone; a round in progress cannot finish.
        auto& s = self->state;
        sitting_out(self);
        if (s.round && !s.done) ++s.stats.abandoned;
        s.round.reset();
        s.done = false;
        s.line.reset();
        publish_stats(self);
      },
      [self](stats_atom) { return self->state.stats; },
  };
}

}  // namespace gridtrain::actors
