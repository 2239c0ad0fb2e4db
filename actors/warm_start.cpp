#include "actors/warm_start.hpp"

#include <algorithm>
#include <cstddef>

#include "actors/messages.hpp"

namespace gridtrain::actors {

std::uint64_t warm_slice_count(std::uint64_t floats, std::uint64_t offset, std::uint64_t want) {
  return std::min({want, kWarmSliceFloats, floats - offset});
}

std::uint64_t next_warm_slice_floats(std::uint64_t floats, std::chrono::nanoseconds took,
                                     std::chrono::nanoseconds budget) {
  if (took.count() <= 0) return kWarmSliceFloats;
  const double next = static_cast<double>(floats) * static_cast<double>(budget.count()) /
                      static_cast<double>(took.count());
  if (next >= static_cast<double>(kWarmSliceFloats)) return kWarmSliceFloats;
  return std::max(kWarmFirstSliceFloats, static_cast<std::uint64_t>(next));
}

Status place_warm_slice(const learner::ParameterStore& store, std::span<float> model, std::uint64_t offset,
                        std::uint64_t count, std::uint64_t signature, std::uint64_t size, const FloatPayload& slice) {
  if (signature != store.signature() || size != model.size() || slice.values.size() != count)
    return Error{.message = "warm start: the peer trains another model"};
  std::copy(slice.values.begin(), slice.values.end(), model.begin() + static_cast<std::ptrdiff_t>(offset));
  return {};
}

Status fetch_model(caf::actor_system& system, const caf::actor& peer, learner::ParameterStore& store,
                   std::chrono::milliseconds timeout) {
  caf::scoped_actor self{system};
  std::vector<float> model(store.size());
  // Slice by slice (actors/messages.hpp, kWarmSliceFloats), assigned once all came.
  for (std::uint64_t offset = 0;;) {
    const std::uint64_t count = warm_slice_count(model.size(), offset);
    Status result;
    self->request(peer, timeout, warm_params_atom::value, offset, count)
        .receive(
            [&](std::uint64_t signature, std::uint64_t size, const FloatPayload& slice) {
              result = place_warm_slice(store, model, offset, count, signature, size, slice);
            },
            [&](const caf::error& e) {
              result = Error{.message = "warm start: the peer did not send its model: " + system.render(e)};
            });
    if (!result.ok()) return result;
    offset += count;
    if (offset >= model.size()) break;
  }
  store.assign(model);
  return {};
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
