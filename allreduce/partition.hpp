#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "allreduce/wire_codec.hpp"
#include "base/result.hpp"

namespace gridtrain::allreduce {

// A slice of the model vector. Offsets are absolute (into the whole vector), never relative to a
// block: BIDMach mixed the two up.
struct Range {
  std::size_t offset = 0;
  std::size_t length = 0;

  std::size_t end() const { return offset + length; }
  friend bool operator==(const Range&, const Range&) = default;
};

// How one round cuts the model vector of N floats among p peers (Algorithm 1, line 3):
// p blocks of ceil(N/p) floats, block j owned by peer j; the last non-empty block may be shorter
// and, when p > N, several trailing blocks are empty. Each block is cut into chunks of at most
// max_chunk_floats, the unit of messages and of quorum counting. Chunks are numbered 0..C-1 in
// model order, across all blocks; empty blocks have no chunks.
class Partition {
 public:
  // The partition, or why there is none: peers == 0, max_chunk_floats == 0, or a chunk count that
  // would not fit in 32 bits. The sizes may come from a peer, so they are checked, not assumed.
  static Result<Partition> create(std::size_t model_floats, std::uint32_t peers, std::size_t max_chunk_floats);

  std::size_t model_floats() const { return model_floats_; }
  std::uint32_t peers() const { return peers_; }
  std::size_t max_chunk_floats() const { return max_chunk_floats_; }
  std::size_t block_floats() const { return block_floats_; }  // ceil(N/p)
  std::uint32_t chunk_count() const { return first_chunk_.back(); }  // C

  // REQUIRES: j < peers()
  Range block(std::uint32_t j) const;
  // Index of block j's first chunk; first_chunk(peers()) == chunk_count().
  // REQUIRES: j <= peers()
  std::uint32_t first_chunk(std::uint32_t j) const { return first_chunk_[j]; }
  // REQUIRES: j < peers()
  std::uint32_t chunks_in_block(std::uint32_t j) const { return first_chunk_[j + 1] - first_chunk_[j]; }

  // REQUIRES: c < chunk_count()
  Range chunk(std::uint32_t c) const;
  // REQUIRES: c < chunk_count()
  std::uint32_t block_of(std::uint32_t c) const;
  // The chunk that holds model index `offset`. REQUIRES: offset < model_floats()
  std::uint32_t chunk_containing(std::size_t offset) const;

  // The chunk that is exactly [offset, offset + length), if there is one. Safe on any input, so
  // it is how offsets and lengths from the wire are checked.
  std::optional<std::uint32_t> find_chunk(std::size_t offset, std::size_t length) const;

 private:
  Partition(std::size_t model_floats, std::uint32_t peers, std::size_t max_chunk_floats);

  std::size_t model_floats_;
  std::uint32_t peers_;
  std::size_t max_chunk_floats_;
  std::size_t block_floats_;
  std::vector<std::uint32_t> first_chunk_;  // p + 1 entries
};

// Where chunks [first, end) of `partition` start when they are encoded in `format` and laid end to end: into `at`,
// at[k] for chunk first + k and at[end − first] their total bytes. The Round lays out its encoded means so, the data
// plane its encoded scatter chunks. REQUIRES: first <= end <= partition.chunk_count()
void wire_offsets(const Partition& partition, WireFormat format, std::uint32_t first, std::uint32_t end,
                  std::vector<std::size_t>& at);

}  // namespace gridtrain::allreduce
