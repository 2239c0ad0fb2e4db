#pragma once
// Where the training set lives while the learner trains (learner.data_on_device). On the device, each step's
// minibatch is gathered there by the backend from the epoch's order (uploaded once an epoch), and nothing of the
// step crosses from the host but the step's start: no host gather, no copy up. In host memory, the Learner
// gathers each minibatch and the backend uploads it (learner/learner.hpp).
//
// The rule. A set fits on the device when it takes at most half of the device memory free before it is copied:
// the other half is left to what grows later (cuDNN's workspaces, the mirror's buffers) and to other processes
// that share the GPU (4 gridnode processes on one GPU, each placing its own shard).
//   auto   on the device when it fits; else in host memory, saying why
//   true   on the device, or an error naming learner.data_on_device with both sizes (where it does not fit) or
//          with why there is no device (a backend that computes in host memory)
//   false  in host memory
// A backend that computes in host memory (the CPU) reports no free device memory: there the set stays where it
// is, and `true` is an error, except with learner.device cpu given explicitly, which the config refuses (it buys
// nothing) and the tests use to run the device path's logic on the CPU backend.

#include <cstddef>
#include <optional>
#include <string>

#include "base/result.hpp"
#include "config/enums.hpp"

namespace gridtrain::learner {

struct DataPlacement {
  bool on_device = false;
  std::string why;  // for the log: where the set is and why, e.g. "on the device (47.0 MB of 80000.0 MB free)"
};

// `free_bytes`: the backend's free device memory, nullopt for a backend that computes in host memory.
// `device`: learner.device as configured. `set_bytes`: the training set's images and labels.
Result<DataPlacement> place_training_set(config::DataOnDevice wanted, config::Device device,
                                         std::optional<std::size_t> free_bytes, std::size_t set_bytes);

}  // namespace gridtrain::learner
