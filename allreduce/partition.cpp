#include "allreduce/partition.hpp"

#include <algorithm>
#include <limits>

namespace gridtrain::allreduce {

namespace {

std::size_t ceil_div(std::size_t a, std::size_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// Block j of a model of n floats cut into blocks of `block_floats`. min() twice: past the end of the model,
// blocks are empty rather than out of range.
Range block_range(std::uint32_t j, std::size_t block_floats, std::size_t n) {
  const std::size_t begin = std::min(std::size_t{j} * block_floats, n);
  const std::size_t end = std::min(begin + block_floats, n);
  return {begin, end - begin};
}

}  // namespace

Result<Partition> Partition::create(std::size_t model_floats, std::uint32_t peers, std::size_t max_chunk_floats) {
  if (peers == 0) return Error{.message = "partition: a line needs at least one peer"};
  if (max_chunk_floats == 0) return Error{.message = "partition: max_chunk_floats must be at least 1"};
  const std::size_t block_floats = ceil_div(model_floats, peers);
  std::size_t total = 0;
  for (std::uint32_t j = 0; j < peers; ++j) {
    total += ceil_div(block_range(j, block_floats, model_floats).length, max_chunk_floats);
    if (total > std::numeric_limits<std::uint32_t>::max())
      return Error{.message = "partition: more than 2^32 - 1 chunks; raise max_chunk_floats"};
  }
  return Partition(model_floats, peers, max_chunk_floats);
}

// REQUIRES: create()'s checks passed.
Partition::Partition(std::size_t model_floats, std::uint32_t peers, std::size_t max_chunk_floats)
    : model_floats_(model_floats),
      peers_(peers),
      max_chunk_floats_(max_chunk_floats),
      block_floats_(ceil_div(model_floats, peers)),
      first_chunk_(std::size_t{peers} + 1) {
  std::uint32_t total = 0;
  for (std::uint32_t j = 0; j < peers; ++j) {
    first_chunk_[j] = total;
    total += static_cast<std::uint32_t>(ceil_div(block(j).length, max_chunk_floats));
  }
  first_chunk_[peers] = total;
}

Range Partition::block(std::uint32_t j) const { return block_range(j, block_floats_, model_floats_); }

Range Partition::chunk(std::uint32_t c) const {
  const std::uint32_t j = block_of(c);
  const Range b = block(j);
  const std::size_t begin = b.offset + std::size_t{c - first_chunk_[j]} * max_chunk_floats_;
  return {begin, std::min(max_chunk_floats_, b.end() - begin)};
}

std::uint32_t Partition::block_of(std::uint32_t c) const {
  // Empty blocks share their first_chunk with the next one, and only trail the non-empty ones, so
  // the last j with first_chunk_[j] <= c is the block that holds c.
  const auto it = std::upper_bound(first_chunk_.begin(), first_chunk_.end() - 1, c);
  return static_cast<std::uint32_t>(it - first_chunk_.begin() - 1);
}

std::uint32_t Partition::chunk_containing(std::size_t offset) const {
  const auto j = static_cast<std::uint32_t>(offset / block_floats_);
  return first_chunk_[j] + static_cast<std::uint32_t>((offset - j * block_floats_) / max_chunk_floats_);
}

std::optional<std::uint32_t> Partition::find_chunk(std::size_t offset, std::size_t length) const {
  if (offset >= model_floats_) return std::nullopt;  // also covers N == 0
  const std::size_t in_block = offset % block_floats_;
  if (in_block % max_chunk_floats_ != 0) return std::nullopt;
  const std::uint32_t c = chunk_containing(offset);
  if (chunk(c).length != length) return std::nullopt;
  return c;
}

void wire_offsets(const Partition& partition, WireFormat format, std::uint32_t first, std::uint32_t end,
                  std::vector<std::size_t>& at) {
  at.resize(end - first + 1);
  std::size_t bytes = 0;
  for (std::uint32_t c = first; c < end; ++c) {
    at[c - first] = bytes;
    bytes += wire_bytes(format, partition.chunk(c).length);
  }
  at[end - first] = bytes;
}

}  // namespace gridtrain::allreduce
