#include "actors/warm_start.hpp"

#include "actors/messages.hpp"

namespace gridtrain::actors {

Status fetch_model(caf::actor_system& system, const caf::actor& peer, learner::ParameterStore& store,
                   std::chrono::milliseconds timeout) {
  caf::scoped_actor self{system};
  Status result;
  self->request(peer, timeout, warm_params_atom::value)
      .receive(
          [&](std::uint64_t signature, const FloatPayload& payload) {
            if (signature != store.signature() || payload.values.size() != store.size()) {
              result = Error{.message = "warm start: the peer trains another model"};
              return;
            }
            store.assign(payload.values);
          },
          [&](const caf::error& e) {
            result = Error{.message = "warm start: the peer did not send its model: " + system.render(e)};
          });
  return result;
}

std::optional<NodeView> warm_start_peer(const GridView& view, std::uint64_t self_id) {
  const NodeView* self = nullptr;
  for (const auto& n : view.nodes)
    if (n.place.node_id == self_id) self = &n;
  std::optional<NodeView> any;
  for (const auto& n : view.nodes) {
    if (n.place.node_id == self_id) continue;
    if (!any) any = n;
    if (!self || n.place.coords.size() != self->place.coords.size()) continue;
    int differ = 0;
    for (std::size_t d = 0; d < n.place.coords.size(); ++d) differ += n.place.coords[d] != self->place.coords[d];
    if (differ == 1) return n;
  }
  return any;
}

}  // namespace gridtrain::actors
