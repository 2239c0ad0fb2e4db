#include "binding/store_access.hpp"

#include <cstddef>
#include <span>

#include "allreduce/elastic_update.hpp"
#include "allreduce/outer_step.hpp"

namespace gridtrain::binding {

dataplane::ModelAccess store_access(std::shared_ptr<learner::ParameterStore> store) {
  dataplane::ModelAccess model;
  model.floats = store->size();
  model.fetch = [store](std::size_t offset, std::span<float> into) { store->fetch_range(offset, into); };
  if (store->mode() == learner::UpdateMode::deferred) {
    // The model's floats are its owner's (the PyTorch front end): each chunk's update waits in the store's pending
    // buffer for the owner to apply it. No fold (it writes the model), and no send straight from the model (a
    // chunk must carry its pending updates: fetch adds them).
    model.update = [store](const allreduce::Round& round, std::size_t begin, std::size_t end, float alpha) {
      store->defer_range(begin, end, [&](std::size_t offset, std::span<float> pending) {
        allreduce::elastic_pull(pending, offset, round, alpha);
      });
    };
  } else {
    model.update = [store](const allreduce::Round& round, std::size_t begin, std::size_t end, float alpha) {
      store->update_range(begin, end, [&](std::size_t offset, std::span<float> values) {
        allreduce::elastic_update(values, offset, round, alpha);
      });
    };
    model.fold = [store](std::size_t offset, std::size_t length, const allreduce::FoldTarget& target, float alpha) {
      store->update_range(offset, offset + length, [&](std::size_t at, std::span<float> values) {
        allreduce::fold_chunk(values, target, at - offset, alpha);
      });
    };
    model.memory = store->arena();
  }
  // The outer step (allreduce.outer nesterov), either mode: the store adds a' - s to the model, or to the pending
  // buffer for the owner to apply.
  model.outer = [store](const allreduce::Round& round, std::size_t begin, std::size_t end,
                        std::span<const float> anchor, allreduce::OuterRates rates) {
    store->outer_range(begin, end, [&](std::size_t offset, std::span<float> target, std::span<float> outer,
                                       std::span<float> velocity) {
      allreduce::outer_update(target, outer, velocity, offset, round, anchor, rates);
    });
  };
  model.fetch_outer = [store](std::size_t offset, std::span<float> into, std::span<float> anchor) {
    store->fetch_range_with_outer(offset, into, anchor);
  };
  return model;
}

}  // namespace gridtrain::binding
