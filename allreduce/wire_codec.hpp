#pragma once
// How a chunk's floats go on the wire: as they are (fp32), or compressed to bf16 or to int8 in blocks, with error
// feedback (Seide et al. 2014; Karimireddy et al. 2019): what a node's compression dropped is kept in a residual and
// added to its next contribution, so that over rounds nothing is lost, only late.
//
//   fp32  4 bytes a float: IEEE 754 binary32, little-endian.
//   bf16  2 bytes a float: the upper half of its binary32, rounded to nearest, ties to even (a NaN stays a NaN).
//   int8  blocks of kInt8BlockFloats floats (the last one shorter): a binary32 scale, little-endian, then one signed
//         byte q per float; the float is q · scale, q in [-127, 127], scale = (the block's largest |x|) / 127.
//
// Decoding checks what a peer could get wrong: the length, an int8 scale that is negative, NaN or infinite, a q of
// -128 (no encoder writes it). A block holding a NaN or an infinity has no finite scale: int8 refuses it where it
// is read, as it would a peer's diverged values; fp32 and bf16 carry it.
//
// Pure: no I/O. Every node that decodes the same bytes gets the same floats, on any CPU (no FMA; the loops are
// GRIDTRAIN_FLOAT_LOOPs).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "base/result.hpp"

namespace gridtrain::allreduce {

enum class WireFormat : std::uint8_t { fp32 = 0, bf16 = 1, int8 = 2 };

// A few thousand floats share a scale: 4 bytes of scale per 2,048 of payload (0.2%), and one large value costs the
// resolution of its block only.
inline constexpr std::size_t kInt8BlockFloats = 2048;

std::string_view wire_format_name(WireFormat format);

// The bytes n floats take in this format.
std::size_t wire_bytes(WireFormat format, std::size_t floats);

// Encodes `in` into `out`. With a residual (error feedback), encodes in + residual and leaves in the residual what
// the encoding dropped: (in + residual) - decode(out). An empty residual: `in` alone, nothing kept.
// REQUIRES: out.size() == wire_bytes(format, in.size()); residual empty or residual.size() == in.size()
void encode_wire(WireFormat format, std::span<const float> in, std::span<float> residual, std::span<std::byte> out);

// Decodes `in` into `out`, or says why these bytes are no encoding of out.size() floats (then `out` is undefined).
Status decode_wire(WireFormat format, std::span<const std::byte> in, std::span<float> out);

}  // namespace gridtrain::allreduce
