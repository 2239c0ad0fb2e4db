#include "actors/dimension_node.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "actors/direct_connection.hpp"
#include "actors/dropped.hpp"
#include "actors/worker.hpp"
#include "allreduce/partition.hpp"

namespace gridtrain::actors {

namespace {

using Self = caf::stateful_actor<DimensionNodeState>*;

enum class Route { now, early, stale, foreign };

Route classify(const DimensionNodeState& s, const allreduce::RoundKey& key) {
  if (key.dim != s.setup.dim) return Route::foreign;
  if (!s.line) return Route::early;
  const auto incoming = std::tie(key.epoch, key.layout_version);
  const auto current = std::tie(s.line->epoch, s.line->layout_version);
  if (incoming < current) return Route::stale;
  if (current < incoming) return Route::early;
  if (s.line_lost) return Route::stale;
  return key.line == s.line->line ? Route::now : Route::foreign;
}

DimensionStats stats_of(const DimensionNodeState& s) {
  DimensionStats out;
  out.dim = s.setup.dim;
  if (s.line) {
    out.layout_version = s.line->layout_version;
    out.line = s.line->line;
    out.peers = static_cast<std::uint32_t>(s.line->peers.size());
  }
  out.rounds = s.own;
  for (const auto& w : s.worker_stats) out.rounds += w;
  return out;
}

// The floats a round message carries.
std::size_t payload_floats(const caf::message& m) {
  if (m.match_element<ScatterChunk>(0)) return m.get_as<ScatterChunk>(0).data.values.size();
  if (m.match_element<ReducedChunk>(0)) return m.get_as<ReducedChunk>(0).data.values.size();
  return 0;
}

// Where a round message goes, by its key; `message` is the whole message, passed on without copying its floats.
void route(Self self, const allreduce::RoundKey& key, caf::message message) {
  auto& s = self->state;
  switch (classify(s, key)) {
    case Route::now:
      self->send(s.workers[key.round % s.line->settings.rounds_in_flight], std::move(message));
      return;
    case Route::early: {
      const std::size_t floats = payload_floats(message);
      if (floats > s.setup.store->size()) {
        log_dropped("dimension_node", s.own.malformed, "a chunk longer than the model");
        return;
      }
      s.own.early_dropped += s.early.hold(key, floats, std::move(message));
      return;
    }
    case Route::stale:
      ++s.own.stale_dropped;
      return;
    case Route::foreign:
      log_dropped("dimension_node", s.own.malformed,
                  "a round message for dim " + std::to_string(key.dim) + " line " + std::to_string(key.line));
      return;
  }
}

// Routes the message being handled, whose key is `key`, without copying its floats.
void pass_on(Self self, allreduce::RoundKey key) {
  route(self, key, self->current_mailbox_element()->move_content_to_message());
}

const allreduce::RoundKey* key_of(const caf::message& m) {
  if (m.match_element<StartRound>(0)) return &m.get_as<StartRound>(0).key;
  if (m.match_element<ScatterChunk>(0)) return &m.get_as<ScatterChunk>(0).key;
  if (m.match_element<ReducedChunk>(0)) return &m.get_as<ReducedChunk>(0).key;
  return nullptr;
}

// Whether `line` can be ours: it comes off the wire, so nothing in it is taken on trust.
Status check_line(const DimensionNodeState& s, const StartLine& line) {
  auto refuse = [](std::string why) { return Error{.source = "StartLine", .message = std::move(why)}; };
  if (line.dim != s.setup.dim) return refuse("for dim " + std::to_string(line.dim));
  if (line.peers.empty() || line.peers.size() > kMaxLinePeers) return refuse("with no or too many peers");
  if (!line.line_master) return refuse("without a LineMaster");
  auto is_us = [&](const LinePeer& p) { return p.node_id == s.setup.node_id; };
  if (std::count_if(line.peers.begin(), line.peers.end(), is_us) != 1)
    return refuse("of a line we are not in exactly once");
  if (std::any_of(line.peers.begin(), line.peers.end(), [](const LinePeer& p) { return !p.dimension_node; }))
    return refuse("with a peer that has no handle");
  if (Status settings = check(line.settings, s.setup.store->size()); !settings.ok()) {
    Error e = settings.error();
    e.source = "StartLine";
    return e;
  }
  // Rounds cut the model into chunks counted in 32 bits: a Partition that cannot exist fails every round.
  if (auto partition = allreduce::Partition::create(line.settings.model_floats,
                                                    static_cast<std::uint32_t>(line.peers.size()),
                                                    line.settings.round.max_chunk_floats);
      !partition)
    return refuse(partition.error().message);
  return {};
}

}  // namespace

caf::behavior dimension_node(caf::stateful_actor<DimensionNodeState>* self, DimensionNodeSetup setup) {
  self->state.setup = std::move(setup);
  // 4N: the newest round whole (see EarlyBuffer); and room for a few rounds' StartRounds beside it.
  self->state.early = allreduce::EarlyBuffer<caf::message>(allreduce::kRoundsInFlightRange.max,
                                                           4 * self->state.setup.store->size() + 64);
  drop_unexpected(self);
  return {
      [self](const StartLine& line) {
        auto& s = self->state;
        if (Status fits = check_line(s, line); !fits.ok()) {
          log_dropped("dimension_node", s.own.malformed, fits.error().to_string());
          return;
        }
        if (s.line && std::tie(line.epoch, line.layout_version) < std::tie(s.line->epoch, s.line->layout_version)) {
          ++s.own.stale_dropped;
          return;
        }
        s.line = line;
        s.line_lost = false;
        while (s.workers.size() < line.settings.rounds_in_flight) {
          const auto slot = static_cast<std::uint32_t>(s.workers.size());
          s.workers.push_back(self->spawn<caf::linked>(
              worker,
              WorkerSetup{s.setup.dim, slot, s.setup.node_id, s.setup.store, caf::actor_cast<caf::actor>(self),
                          s.setup.stall_limit}));
          s.worker_stats.emplace_back();
        }
        // Every worker, also those beyond this line's k: each drops its round of the old line.
        for (const auto& w : s.workers) self->send(w, line);
        for (const auto& peer : line.peers)
          connect_directly(self, s.setup.node_id, peer.node_id, peer.dimension_node, peer.address);
        std::size_t superseded = 0;
        std::vector<caf::message> early = s.early.release(line.epoch, line.layout_version, superseded);
        s.own.early_dropped += superseded;
        for (auto& m : early) {
          const allreduce::RoundKey key = *key_of(m);  // before the message is moved into route()
          route(self, key, std::move(m));
        }
      },
      // The key is copied before the message is taken out of the mailbox: `m` may not outlive the move.
      [self](const StartRound& m) { pass_on(self, m.key); },
      [self](const ScatterChunk& m) { pass_on(self, m.key); },
      [self](const ReducedChunk& m) { pass_on(self, m.key); },
      [self](lost_atom) {
        auto& s = self->state;
        s.line_lost = true;
        for (const auto& w : s.workers) self->send(w, lost_atom::value);
      },
      [self](lost_atom, std::uint64_t epoch, std::uint64_t layout_version) {
        // Only a line older than the version the node was welcomed at: a line of that version may be here already.
        auto& s = self->state;
        if (!s.line || std::tie(s.line->epoch, s.line->layout_version) >= std::tie(epoch, layout_version)) return;
        s.line_lost = true;
        for (const auto& w : s.workers) self->send(w, lost_atom::value);
      },
      [self](std::uint32_t slot, const RoundStats& stats) {
        auto& s = self->state;
        if (slot >= s.worker_stats.size()) return;
        s.worker_stats[slot] = stats;
      },
      [self](stats_atom) { return stats_of(self->state); },
  };
}

}  // namespace gridtrain::actors
