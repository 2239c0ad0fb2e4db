#include "actors/line_master.hpp"

#include <algorithm>
#include <tuple>

#include "actors/dropped.hpp"
#include "allreduce/quorum.hpp"

namespace gridtrain::actors {

namespace {

using Self = caf::stateful_actor<LineMasterState>*;

void start_next_rounds(Self self) {
  auto& s = self->state;
  if (!s.line || s.line->peers.size() < 2) return;
  const StartLine& line = *s.line;
  while (s.advance && s.in_flight.size() < line.settings.rounds_in_flight &&
         (!s.every_steps_budget || *s.every_steps_budget > 0)) {
    const allreduce::RoundKey key{line.epoch, line.layout_version, line.dim, line.line, s.next_round};
    s.in_flight.emplace(s.next_round, std::vector<bool>(line.peers.size(), false));
    ++s.next_round;
    ++s.rounds_started;
    s.advance = false;
    if (s.every_steps_budget) --*s.every_steps_budget;
    auto message = caf::make_message(StartRound{key});
    for (const auto& peer : line.peers) self->send(peer.dimension_node, message);
  }
}

}  // namespace

caf::behavior line_master(caf::stateful_actor<LineMasterState>* self, std::uint32_t dim, bool paced_by_every_steps) {
  self->state.dim = dim;
  if (paced_by_every_steps) self->state.every_steps_budget = 0;
  drop_unexpected(self);
  return {
      [self](StartLine& line) {
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
        s.advance_quorum = allreduce::quorum(s.line->settings.round.advance_threshold,
                                             static_cast<std::uint32_t>(s.line->peers.size()));
        s.next_round = 0;  // rounds are numbered per layout version: the key tells them apart
        s.in_flight.clear();
        s.advance = true;
        auto message = caf::make_message(*s.line);
        for (const auto& peer : s.line->peers) self->send(peer.dimension_node, message);
        start_next_rounds(self);
      },
      [self](const StopLine& stop) {
        auto& s = self->state;
        if (!s.line || stop.dim != s.line->dim || stop.line != s.line->line ||
            std::tie(stop.epoch, stop.layout_version) <= std::tie(s.line->epoch, s.line->layout_version))
          return;
        s.line.reset();
        s.in_flight.clear();
      },
      [self](const RoundDone& done) {
        auto& s = self->state;
        if (!s.line || done.key.epoch != s.line->epoch || done.key.layout_version != s.line->layout_version ||
            done.key.dim != s.line->dim || done.key.line != s.line->line) {
          ++s.stale;
          return;
        }
        auto it = s.in_flight.find(done.key.round);
        if (it == s.in_flight.end()) return;  // every peer reported it already: a duplicate
        if (done.from >= it->second.size()) {
          log_dropped("line_master", s.bad_messages, "a RoundDone from a peer index outside the line");
          return;
        }
        it->second[done.from] = true;
        const auto reported = static_cast<std::uint32_t>(std::count(it->second.begin(), it->second.end(), true));
        if (done.key.round + 1 == s.next_round && reported >= s.advance_quorum) s.advance = true;
        if (reported == it->second.size()) s.in_flight.erase(it);
        start_next_rounds(self);
      },
      [self](stats_atom) { return self->state.rounds_started; },
      [self](allow_rounds_atom, std::uint64_t rounds) {
        auto& s = self->state;
        if (s.every_steps_budget) *s.every_steps_budget += rounds;  // not paced: there is no limit to raise
        start_next_rounds(self);
      },
  };
}

}  // namespace gridtrain::actors
