#pragma once
// The parts of a model slice that a round has means for: the walk the elastic update and the outer step share.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "allreduce/partition.hpp"
#include "allreduce/round.hpp"

namespace gridtrain::allreduce {

// Calls fn(c, from, n) for the part [from, from + n) of [offset, offset + size) in each chunk c that has a mean
// (Round::count(c) > 0), in chunk order.
template <class Fn>
void for_each_counted_part(const Round& round, std::size_t offset, std::size_t size, Fn&& fn) {
  const Partition& part = round.partition();
  const std::size_t end = offset + size;
  if (offset >= end) return;
  for (std::uint32_t c = part.chunk_containing(offset); c < part.chunk_count(); ++c) {
    const Range r = part.chunk(c);
    if (r.offset >= end) break;
    if (round.count(c) == 0) continue;
    const std::size_t from = std::max(r.offset, offset);
    fn(c, from, std::min(r.end(), end) - from);
  }
}

}  // namespace gridtrain::allreduce
