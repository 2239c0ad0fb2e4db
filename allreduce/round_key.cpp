#include "allreduce/round_key.hpp"

#include <tuple>

namespace gridtrain::allreduce {

KeyOrder key_order(const RoundKey& incoming, const RoundKey& current) {
  if (incoming.dim != current.dim || incoming.line != current.line) return KeyOrder::foreign;
  const auto a = std::tie(incoming.epoch, incoming.layout_version, incoming.round);
  const auto b = std::tie(current.epoch, current.layout_version, current.round);
  if (a < b) return KeyOrder::older;
  if (b < a) return KeyOrder::newer;
  return KeyOrder::same;
}

}  // namespace gridtrain::allreduce
