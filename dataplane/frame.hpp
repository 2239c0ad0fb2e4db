#pragma once
// A data-plane frame: one chunk of one allreduce round, sent over a line peer's own connection.
//
//   offset  size  field
//        0     4  magic "GTDF"
//        4     1  kind: 1 scatter (our values for a chunk of the receiver's block), 2 reduced (the mean of a chunk
//                 of the sender's block), 3 delta (that mean less the receiver's scatter of the chunk)
//        5     1  wire format of the payload (allreduce::WireFormat): 0 fp32, 1 bf16, 2 int8
//        6     2  zero
//        8     8  epoch           the round key (allreduce::RoundKey): epoch,
//       16     8  layout_version  layout version,
//       24     8  line            line,
//       32     8  round           round,
//       40     4  dim             and dimension
//       44     4  from: the sender's index among the line's peers
//       48     8  offset: of the chunk in the model vector, in floats
//       56     4  length: of the chunk, in floats; the payload that follows is allreduce::wire_bytes(wire, length)
//       60     4  count: contributions averaged (reduced, delta), 1 (scatter)
//       64        payload: the chunk in the wire format (allreduce/wire_codec.hpp); fp32 is IEEE 754 binary32
//
// All fields little-endian. The header says how long the payload is, and a receiver checks that length against the
// round the frame names (allreduce::Partition::find_chunk) before it reads a byte of it or allocates anything:
// decode_frame_header() checks only what needs no round.

#include <cstddef>
#include <cstdint>
#include <span>

#include "allreduce/round_key.hpp"
#include "allreduce/wire_codec.hpp"
#include "base/result.hpp"

namespace gridtrain::dataplane {

inline constexpr std::size_t kFrameHeaderBytes = 64;

enum class FrameKind : std::uint8_t { scatter = 1, reduced = 2, delta = 3 };

struct FrameHeader {
  FrameKind kind = FrameKind::scatter;
  allreduce::RoundKey key;
  std::uint32_t from = 0;
  std::uint64_t offset = 0;
  std::uint32_t length = 0;
  std::uint32_t count = 1;
  allreduce::WireFormat wire = allreduce::WireFormat::fp32;

  std::size_t payload_bytes() const { return allreduce::wire_bytes(wire, length); }
  friend bool operator==(const FrameHeader&, const FrameHeader&) = default;
};

void encode(const FrameHeader& header, std::span<std::byte, kFrameHeaderBytes> out);

// The header, or why these 64 bytes are none: another magic, an unknown kind or wire format, reserved bytes set, a
// length of 0, a count of 0, a scatter whose count is not 1, or a delta that is not fp32 (a compressed line sends
// every peer the same mean).
Result<FrameHeader> decode_frame_header(std::span<const std::byte, kFrameHeaderBytes> in);

}  // namespace gridtrain::dataplane
