#include <doctest/doctest.h>

#include <limits>
#include <stdexcept>
#include <vector>

#include "allreduce/partition.hpp"

using gridtrain::allreduce::Partition;
using gridtrain::allreduce::Range;

namespace {

// Holds every structural promise of a Partition; returns the first one broken, or "".
std::string broken_promise(const Partition& part) {
  const std::size_t n = part.model_floats();
  const std::uint32_t p = part.peers();
  const std::size_t block = part.block_floats();
  if (block * p < n || (block > 0 && (block - 1) * p >= n)) return "block size is not ceil(N/p)";
  std::vector<int> covered(n, 0);
  std::uint32_t c = 0;
  bool seen_short = false;
  for (std::uint32_t j = 0; j < p; ++j) {
    const Range b = part.block(j);
    if (b.offset != std::min(std::size_t{j} * block, n)) return "block offset is not absolute";
    if (b.length > block) return "block longer than ceil(N/p)";
    if (seen_short && b.length != 0) return "a block after a short one is not empty";
    if (b.length < block) seen_short = true;
    if (part.first_chunk(j) != c) return "chunks of a block are not numbered after the previous block's";
    std::size_t at = b.offset;
    for (std::uint32_t k = 0; k < part.chunks_in_block(j); ++k, ++c) {
      const Range r = part.chunk(c);
      if (r.offset != at) return "chunk offset is not absolute, or chunks leave a gap";
      if (r.length == 0 || r.length > part.max_chunk_floats()) return "chunk length out of (0, max_chunk_floats]";
      if (part.block_of(c) != j) return "block_of disagrees with the block that holds the chunk";
      auto found = part.find_chunk(r.offset, r.length);
      if (!found || *found != c) return "find_chunk does not find a chunk by its own offset and length";
      if (r.length > 1 && part.find_chunk(r.offset + 1, r.length)) return "find_chunk accepts an offset inside a chunk";
      for (std::size_t t = r.offset; t < r.end(); ++t) {
        if (part.chunk_containing(t) != c) return "chunk_containing disagrees with the chunk's range";
        ++covered[t];
      }
      at = r.end();
    }
    if (at != b.end()) return "chunks do not cover their block";
  }
  if (c != part.chunk_count() || part.first_chunk(p) != c) return "chunk_count is not the number of chunks";
  for (int k : covered) {
    if (k != 1) return "blocks do not cover [0, N) exactly once";
  }
  return "";
}

}  // namespace

TEST_CASE("a partition covers [0,N) exactly once with absolute offsets, for a sweep of sizes, peers and chunks") {
  for (std::size_t n : {0, 1, 2, 3, 4, 5, 7, 16, 17, 100, 1000, 10007}) {
    for (std::uint32_t p = 1; p <= 16; ++p) {
      for (std::size_t chunk : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{64}, std::size_t{1000},
                                std::numeric_limits<std::size_t>::max()}) {
        const Partition part = Partition::create(n, p, chunk).value();
        CAPTURE(n);
        CAPTURE(p);
        CAPTURE(chunk);
        CHECK(broken_promise(part) == "");
      }
    }
  }
}

TEST_CASE("the last block of a partition is shorter, and blocks past the model are empty") {
  const Partition shorter = Partition::create(10, 4, 2).value();  // blocks of 3: [0,3) [3,6) [6,9) [9,10)
  CHECK(shorter.block_floats() == 3);
  CHECK(shorter.block(3) == Range{9, 1});
  CHECK(shorter.chunk_count() == 7);  // 2 + 2 + 2 + 1
  CHECK(shorter.chunk(1) == Range{2, 1});
  CHECK(shorter.chunk(2) == Range{3, 2});  // absolute, not 0 relative to block 1

  const Partition empty_tail = Partition::create(3, 5, 1).value();  // p > N: blocks [0,1) [1,2) [2,3) [3,3) [3,3)
  CHECK(empty_tail.block(2) == Range{2, 1});
  CHECK(empty_tail.block(3) == Range{3, 0});
  CHECK(empty_tail.block(4) == Range{3, 0});
  CHECK(empty_tail.chunks_in_block(3) == 0);
  CHECK(empty_tail.chunks_in_block(4) == 0);
  CHECK(empty_tail.chunk_count() == 3);
  CHECK(empty_tail.block_of(2) == 2);

  const Partition nothing = Partition::create(0, 3, 4).value();
  CHECK(nothing.chunk_count() == 0);
  CHECK(nothing.block(0) == Range{0, 0});
}

TEST_CASE("find_chunk rejects offsets and lengths that are not a chunk of the partition") {
  const Partition part = Partition::create(10, 4, 2).value();  // chunks [0,2) [2,3) [3,5) [5,6) [6,8) [8,9) [9,10)
  CHECK(part.find_chunk(3, 2) == 2u);
  CHECK_FALSE(part.find_chunk(4, 1).has_value());   // inside a chunk
  CHECK_FALSE(part.find_chunk(4, 2).has_value());   // inside a chunk, with a chunk's length
  CHECK_FALSE(part.find_chunk(3, 1).has_value());   // short
  CHECK_FALSE(part.find_chunk(3, 3).has_value());   // long
  CHECK_FALSE(part.find_chunk(3, 0).has_value());
  CHECK_FALSE(part.find_chunk(10, 0).has_value());  // at the end
  CHECK_FALSE(part.find_chunk(11, 1).has_value());
  CHECK_FALSE(part.find_chunk(std::numeric_limits<std::size_t>::max(), 1).has_value());
  CHECK_FALSE(part.find_chunk(9, std::numeric_limits<std::size_t>::max()).has_value());
  CHECK_FALSE(Partition::create(0, 3, 4).value().find_chunk(0, 0).has_value());
}

TEST_CASE("a partition refuses zero peers, zero-float chunks, and more chunks than 32 bits can count") {
  CHECK(Partition::create(10, 0, 4).error().message.find("at least one peer") != std::string::npos);
  CHECK(Partition::create(10, 2, 0).error().message.find("max_chunk_floats") != std::string::npos);
  CHECK(Partition::create(std::size_t{1} << 33, 2, 1).error().message.find("2^32 - 1 chunks") != std::string::npos);
  CHECK(Partition::create((std::size_t{1} << 32) - 1, 1, 1).ok());  // exactly the most chunks there may be
  CHECK_FALSE(Partition::create(std::size_t{1} << 32, 1, 1).ok());
}
