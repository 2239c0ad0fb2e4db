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

std::optional<Placement> warm_start_peer(const std::vector<Placement>& members, std::uint64_t self_id) {
  const Placement* self = nullptr;
  for (const auto& m : members)
    if (m.node_id == self_id) self = &m;
  std::optional<Placement> any;
  for (const auto& m : members) {
    if (m.node_id == self_id) continue;
    if (!any) any = m;
    if (!self || m.coords.size() != self->coords.size()) continue;
    int differ = 0;
    for (std::size_t d = 0; d < m.coords.size(); ++d) differ += m.coords[d] != self->coords[d];
    if (differ == 1) return m;
  }
  return any;
}

}  // namespace gridtrain::actors
