#include "actors/dimension_node.hpp"

#include <algorithm>
#include <string>
#include <tuple>

#include "actors/direct_connection.hpp"
#include "actors/dropped.hpp"
#include "actors/token_proof.hpp"
#include "binding/store_access.hpp"
#include "allreduce/partition.hpp"

namespace gridtrain::actors {

namespace {

using Self = caf::stateful_actor<DimensionNodeState>*;

static_assert(kDimsOffered <= dataplane::kMaxLineDims, "the data plane runs a line in every dimension offered");

DimensionStats stats_of(const DimensionNodeState& s) {
  DimensionStats out;
  out.dim = s.setup.dim;
  if (s.line) {
    out.layout_version = s.line->layout_version;
    out.line = s.line->line;
    out.peers = static_cast<std::uint32_t>(s.line->peers.size());
  }
  out.rounds = s.own;
  const dataplane::DimensionCounters& c = s.setup.data->counters(s.setup.dim);
  out.rounds.rounds_done += c.rounds_done;
  out.rounds.caught_up += c.caught_up;
  out.rounds.abandoned += c.abandoned;
  out.rounds.stale_dropped += c.stale_dropped;
  out.rounds.malformed += c.malformed;
  out.rounds.quorum_shortfalls += c.quorum_shortfalls;
  out.rounds.bytes_sent += c.bytes_sent;
  out.rounds.bytes_received += c.bytes_received;
  out.rounds.frames_unsent += c.frames_unsent;
  return out;
}

// Whether `key` is a round of the line we hold now.
bool current(const DimensionNodeState& s, const allreduce::RoundKey& key) {
  return s.line && !s.line_lost && key.dim == s.setup.dim && key.line == s.line->line &&
         std::tie(key.epoch, key.layout_version) == std::tie(s.line->epoch, s.line->layout_version);
}

// In timeout quorum mode, the round's deadline: the data plane is told when it has passed (after the quorum
// timeout, or `after`, which the data plane asked for because the round's frames were still landing).
void arm_deadline(Self self, const allreduce::RoundKey& key, std::optional<std::uint32_t> after = std::nullopt) {
  auto& s = self->state;
  const allreduce::RoundConfig& round = s.line->settings.round;
  if (round.quorum != allreduce::QuorumMode::timeout) return;
  const auto now = self->clock().now();
  if (auto at = s.deadlines.add(key, now + std::chrono::milliseconds(after.value_or(round.quorum_timeout_ms))))
    set_deadline_timer(self, *at, now);
}

dataplane::LineSpec line_spec(const DimensionNodeState& s, const StartLine& line) {
  dataplane::LineSpec spec;
  spec.epoch = line.epoch;
  spec.layout_version = line.layout_version;
  spec.dim = line.dim;
  spec.line = line.line;
  for (std::uint32_t i = 0; i < line.peers.size(); ++i) {
    spec.peers.push_back(line.peers[i].node_id);
    if (line.peers[i].node_id == s.setup.node_id) spec.self_index = i;
  }
  spec.round = line.settings.round;
  spec.rounds_in_flight = line.settings.rounds_in_flight;
  return spec;
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

dataplane::EndpointSetup endpoint_setup(std::uint64_t node_id, std::shared_ptr<learner::ParameterStore> store,
                                        std::string token, std::shared_ptr<const std::vector<caf::actor>> routes) {
  dataplane::EndpointSetup data;
  data.node_id = node_id;
  data.model = binding::store_access(std::move(store));
  data.mac = [token = std::move(token)](std::span<const std::byte> message) { return token_mac(token, message); };
  data.on_event = [routes = std::move(routes)](const dataplane::RoundEvent& e) {
    if (e.key.dim < routes->size())
      caf::anon_send((*routes)[e.key.dim], round_event_atom::value, static_cast<std::uint8_t>(e.kind), e.key,
                     e.self_index, e.chunks_missing, e.wait_ms);
  };
  return data;
}

caf::behavior dimension_node(caf::stateful_actor<DimensionNodeState>* self, DimensionNodeSetup setup) {
  self->state.setup = std::move(setup);
  drop_unexpected(self);
  return {
      [self](const StartLine& line) {
        auto& s = self->state;
        if (Status fits = check_line(s, line); !fits.ok()) {
          log_dropped("dimension_node", s.own.malformed, fits.error().to_string());
          return;
        }
        // Older than ours, or a LineMaster's nudge (line_master.hpp) of the line this node dropped on losing the
        // cluster: a newer line follows its rejoin. A nudge of the line we hold changes nothing below.
        const auto order = s.line ? std::tie(line.epoch, line.layout_version) <=>
                                        std::tie(s.line->epoch, s.line->layout_version)
                                  : std::strong_ordering::greater;
        if (order < 0 || (order == 0 && s.line_lost)) {
          ++s.own.stale_dropped;
          return;
        }
        if (order > 0) s.deadlines.clear();  // the old line's rounds are dropped; a nudge keeps ours
        s.line = line;
        s.line_lost = false;
        std::vector<std::string> data_addresses;
        for (const auto& peer : line.peers) data_addresses.push_back(peer.data_address);
        s.setup.data->start_line(line_spec(s, line), std::move(data_addresses));
        // The LineMaster's StartRounds and our RoundDones go over CAF: a direct route, not a relay.
        for (const auto& peer : line.peers)
          connect_directly(self, s.setup.credentials, s.setup.node_id, peer.node_id, peer.dimension_node, peer.address);
      },
      [self](const StartRound& m) {
        auto& s = self->state;
        if (!current(s, m.key)) {
          ++s.own.stale_dropped;
          return;
        }
        s.setup.data->start_round(m.key);
        arm_deadline(self, m.key);
      },
      [self](deadline_atom, std::int64_t at) {
        auto& s = self->state;
        for (const allreduce::RoundKey& key : due_deadlines(self, s.deadlines, at))
          if (current(s, key)) s.setup.data->deadline(key);
      },
      [self](round_event_atom, std::uint8_t kind, const allreduce::RoundKey& key, std::uint32_t self_index,
             std::uint32_t chunks_missing, std::uint32_t wait_ms) {
        auto& s = self->state;
        if (!current(s, key)) return;
        if (kind == static_cast<std::uint8_t>(dataplane::RoundEvent::Kind::done)) {
          s.deadlines.remove(key);
          self->send(s.line->line_master, RoundDone{key, self_index, chunks_missing});
        } else if (kind == static_cast<std::uint8_t>(dataplane::RoundEvent::Kind::waiting))
          arm_deadline(self, key, wait_ms);
        else
          arm_deadline(self, key);
      },
      [self](lost_atom) {
        auto& s = self->state;
        s.line_lost = true;
        s.deadlines.clear();
        s.setup.data->drop_line(s.setup.dim);
      },
      [self](lost_atom, std::uint64_t epoch, std::uint64_t layout_version) {
        // Only a line older than the version the node was welcomed at: a line of that version may be here already.
        auto& s = self->state;
        if (!s.line || std::tie(s.line->epoch, s.line->layout_version) >= std::tie(epoch, layout_version)) return;
        s.line_lost = true;
        s.deadlines.clear();
        s.setup.data->drop_line(s.setup.dim, std::pair{epoch, layout_version});
      },
      [self](stats_atom) { return stats_of(self->state); },
  };
}

}  // namespace gridtrain::actors
