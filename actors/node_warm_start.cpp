// Warm starts, both sides: a node welcomed into a running cluster copies the model of a line peer slice by slice,
// asking another member when the one asked dies first; and a member answers such a node with a slice of its own
// (actors/node_internal.hpp; actors/warm_start.hpp sizes and checks the slices).

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "actors/node_internal.hpp"
#include "actors/warm_start.hpp"

namespace gridtrain::actors::node_internal {

namespace {

// Copies the model of a line peer (a member otherwise) into this node's store, then calls `done` with the id of
// the member copied (0: alone in its last GridState, nothing to copy) or why it could not. Through the handle the
// GridState carries, over the connection the pair already has (see reach() in node_failover.cpp).
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

}  // namespace

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

// A joining node's warm start: a slice of our model now, read under the tensor locks.
caf::result<std::uint64_t, std::uint64_t, FloatPayload> warm_params(Self self, std::uint64_t offset,
                                                                    std::uint64_t count) {
  const auto& store = self->state.setup.store;
  const std::uint64_t size = store->size();
  if (offset > size || count > kWarmSliceFloats)
    return caf::make_error(caf::sec::invalid_argument,
                           "warm start: asked for " + std::to_string(count) + " floats at " + std::to_string(offset) +
                               " of a model of " + std::to_string(size) + " (at most " +
                               std::to_string(kWarmSliceFloats) + " at a time)");
  FloatPayload payload;
  payload.values.resize(std::min(count, size - offset));
  store->fetch_range(offset, payload.values);
  return {store->signature(), size, std::move(payload)};
}

}  // namespace gridtrain::actors::node_internal
