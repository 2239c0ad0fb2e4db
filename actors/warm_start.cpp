#include "actors/warm_start.hpp"

#include <tuple>

namespace gridtrain::actors {

caf::message_handler warm_params_handler(std::shared_ptr<learner::ParameterStore> store) {
  return {[store](warm_params_atom) -> std::tuple<std::uint64_t, FloatPayload> {
    FloatPayload payload;
    if (!store) return {0, std::move(payload)};
    payload.values.resize(store->size());
    store->fetch(payload.values);
    return {store->signature(), std::move(payload)};
  }};
}

config::Status fetch_model(caf::actor_system& system, const caf::actor& peer, learner::ParameterStore& store,
                           std::chrono::milliseconds timeout) {
  caf::scoped_actor self{system};
  config::Status result;
  self->request(peer, timeout, warm_params_atom::value)
      .receive(
          [&](std::uint64_t signature, const FloatPayload& payload) {
            if (signature != store.signature() || payload.values.size() != store.size()) {
              result = config::Error{.message = "warm start: the peer trains another model"};
              return;
            }
            store.assign(payload.values);
          },
          [&](const caf::error& e) {
            result = config::Error{.message = "warm start: the peer did not send its model: " + system.render(e)};
          });
  return result;
}

std::optional<NodeStatus> warm_start_peer(const ClusterStatus& status, std::uint64_t self_id) {
  const NodeStatus* self = nullptr;
  for (const auto& n : status.nodes)
    if (n.id == self_id) self = &n;
  std::optional<NodeStatus> any;
  for (const auto& n : status.nodes) {
    if (n.id == self_id) continue;
    if (!any) any = n;
    if (!self || n.coords.size() != self->coords.size()) continue;
    int differ = 0;
    for (std::size_t d = 0; d < n.coords.size(); ++d) differ += n.coords[d] != self->coords[d];
    if (differ == 1) return n;
  }
  return any;
}

}  // namespace gridtrain::actors
