#include "learner/data_placement.hpp"

#include <cstdio>

namespace gridtrain::learner {

namespace {

std::string megabytes(std::size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

}  // namespace

Result<DataPlacement> place_training_set(config::DataOnDevice wanted, config::Device device,
                                         std::optional<std::size_t> free_bytes, std::size_t set_bytes) {
  using config::DataOnDevice;
  if (wanted == DataOnDevice::no) return DataPlacement{false, "in host memory (learner.data_on_device false)"};
  if (!free_bytes) {
    if (wanted == DataOnDevice::automatic)
      return DataPlacement{false, "in host memory (the CPU backend computes there)"};
    if (device != config::Device::cpu)
      return Error{.key = "learner.data_on_device",
                   .message = "expected a GPU for true, found the CPU backend (learner.device auto found no usable "
                              "GPU): set learner.data_on_device auto or false to train on the CPU"};
    return DataPlacement{true, "in the CPU backend's own copy (learner.device cpu with data_on_device true)"};
  }
  const std::string sizes = megabytes(set_bytes) + " of " + megabytes(*free_bytes) + " free";
  if (set_bytes <= *free_bytes / 2) return DataPlacement{true, "on the device (" + sizes + ")"};
  if (wanted == DataOnDevice::yes)
    return Error{.key = "learner.data_on_device",
                 .message = "expected the training set to fit in half the device's free memory for true, found " +
                            sizes + ": set learner.data_on_device auto (host memory when it does not fit) or false"};
  return DataPlacement{false, "in host memory (" + sizes + ": more than half, learner.data_on_device auto)"};
}

}  // namespace gridtrain::learner
