#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "allreduce/round_key.hpp"

namespace gridtrain::allreduce {

// The messages of one round, as plain values. The actors put them on the wire; a Round only
// produces Sends and consumes ScatterChunks and ReducedChunks.

// What a Round made of an incoming message. Only `accepted` changed its state.
enum class Verdict : std::uint8_t {
  accepted,
  duplicate,  // this sender already delivered this chunk
  late,       // the chunk was already reduced, or the round already complete
  stale,      // older round key: dropped
  newer,      // newer round key: the caller must finish() this round and move on (catchUp)
  malformed,  // wrong dim/line, sender out of range, offset/length not a chunk of the partition, bad count
};

std::string_view to_string(Verdict verdict);

// Algorithm 1, line 5: peer `from` sends us its values for one chunk of our block.
struct ScatterChunk {
  RoundKey key;
  std::uint32_t from = 0;
  std::size_t offset = 0;  // absolute, into the whole model vector
  std::span<const float> data;
};

// Algorithm 1, line 12: peer `from` sends us one chunk of its block reduced: the mean, or (`delta`) the mean less
// the values we contributed to it, as they reached `from` (docs/design.md, "Deltas").
struct ReducedChunk {
  RoundKey key;
  std::uint32_t from = 0;
  std::size_t offset = 0;  // absolute, into the whole model vector
  std::uint32_t count = 0;  // contributions averaged, 1..p
  std::span<const float> data;
  bool delta = false;
};

// scatter: our values for a chunk of the receiver's block. reduced: the mean of a chunk of ours, to a peer whose
// contribution it lacks. delta: the mean less that peer's contribution, to a peer whose contribution it counts.
enum class SendKind : std::uint8_t { scatter, reduced, delta };

// A message a Round asks its caller to send to peer `to`, under the round's key. `data` points into the Round's
// own buffers, valid and unchanged until the Round is reset() or destroyed; a scatter's points into the values
// scatter() was given, which the caller keeps valid.
struct Send {
  SendKind kind = SendKind::scatter;
  std::uint32_t to = 0;
  std::uint32_t chunk = 0;   // index in the Partition, for the caller's bookkeeping
  std::size_t offset = 0;    // absolute
  std::uint32_t count = 1;   // scatter: 1 (our own values); reduced, delta: contributions averaged
  std::span<const float> data;
  // A reduced chunk on a line whose wire format is not fp32: `data` encoded, once for every peer, in the Round's
  // buffers; `data` itself then holds what these bytes decode to. Empty: the payload is `data` as fp32.
  std::span<const std::byte> wire;
};

}  // namespace gridtrain::allreduce
