#include "allreduce/wire_codec.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "base/float_loop.hpp"

namespace gridtrain::allreduce {

static_assert(std::endian::native == std::endian::little, "the wire formats are little-endian, as this host");

namespace {

// bf16 goes through a buffer on the stack this many floats at a time.
constexpr std::size_t kStagedFloats = 2048;

Error malformed(std::string message) { return Error{.key = "frame payload", .message = std::move(message)}; }

// Round to nearest, ties to even, on the binary32's bits; a NaN keeps its sign and becomes a quiet NaN (its payload
// could round into the exponent and make an infinity).
inline std::uint16_t to_bf16(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
inline float from_bf16(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

// A null residual: `in` alone, nothing kept.
GRIDTRAIN_FLOAT_LOOP void bf16_run(std::size_t n, const float* __restrict in, float* __restrict residual,
                                   std::uint16_t* __restrict out) {
  for (std::size_t t = 0; t < n; ++t) {
    const float x = residual ? in[t] + residual[t] : in[t];
    out[t] = to_bf16(x);
    // A NaN or infinity goes out as it is; keeping x - x (NaN) would spoil this float's every later contribution.
    if (residual) residual[t] = std::isfinite(x) ? x - from_bf16(out[t]) : 0.0f;
  }
}
GRIDTRAIN_FLOAT_LOOP void bf16_decode_run(std::size_t n, const std::uint16_t* __restrict in, float* __restrict out) {
  for (std::size_t t = 0; t < n; ++t) out[t] = from_bf16(in[t]);
}

// x + residual into `sum` (a null residual: x), and the block's largest |x|, or NaN where any sum is not finite
// (max alone would pass a NaN over).
GRIDTRAIN_FLOAT_LOOP float sum_run(std::size_t n, const float* __restrict in, const float* __restrict residual,
                                   float* __restrict sum) {
  float largest = 0;
  bool finite = true;
  for (std::size_t t = 0; t < n; ++t) {
    sum[t] = residual ? in[t] + residual[t] : in[t];
    largest = std::max(largest, std::fabs(sum[t]));
    finite &= std::isfinite(sum[t]);
  }
  return finite ? largest : std::numeric_limits<float>::quiet_NaN();
}
// q = x / scale rounded half away from zero, by a multiply (the same on every CPU: IEEE, no FMA), clamped.
GRIDTRAIN_FLOAT_LOOP void quantize_run(std::size_t n, const float* __restrict x, float inverse, float scale,
                                       std::int8_t* __restrict q, float* __restrict residual) {
  for (std::size_t t = 0; t < n; ++t) {
    const float y = x[t] * inverse;
    const float r = y + (y >= 0 ? 0.5f : -0.5f);
    const float c = std::min(127.0f, std::max(-127.0f, r));
    q[t] = static_cast<std::int8_t>(c);
    if (residual) residual[t] = x[t] - static_cast<float>(q[t]) * scale;
  }
}
// out = q · scale; returns the smallest q (a -128 is refused).
GRIDTRAIN_FLOAT_LOOP int dequantize_run(std::size_t n, const std::int8_t* __restrict q, float scale,
                                        float* __restrict out) {
  int smallest = 0;
  for (std::size_t t = 0; t < n; ++t) {
    out[t] = static_cast<float>(q[t]) * scale;
    smallest = std::min(smallest, static_cast<int>(q[t]));
  }
  return smallest;
}

void encode_int8(std::span<const float> in, std::span<float> residual, std::span<std::byte> out) {
  float sum[kInt8BlockFloats];
  std::byte* at = out.data();
  for (std::size_t from = 0; from < in.size(); from += kInt8BlockFloats) {
    const std::size_t n = std::min(kInt8BlockFloats, in.size() - from);
    float* kept = residual.empty() ? nullptr : residual.data() + from;
    const float largest = sum_run(n, in.data() + from, kept, sum);
    // A NaN or infinity anywhere makes the scale NaN: written so, refused where it is read. The block's residual is
    // dropped with it (kept, a NaN would spoil its every later contribution).
    const bool finite = !std::isnan(largest);
    const float scale = finite ? largest / 127.0f : std::numeric_limits<float>::quiet_NaN();
    std::memcpy(at, &scale, sizeof scale);
    auto* q = reinterpret_cast<std::int8_t*>(at + sizeof scale);
    if (!finite || scale == 0) {
      std::memset(q, 0, n);
      if (kept) std::fill(kept, kept + n, 0.0f);  // scale 0: every float was 0, and is sent exactly
    } else {
      quantize_run(n, sum, 127.0f / largest, scale, q, kept);
    }
    at += sizeof scale + n;
  }
}

}  // namespace

std::string_view wire_format_name(WireFormat format) {
  switch (format) {
    case WireFormat::fp32: return "fp32";
    case WireFormat::bf16: return "bf16";
    case WireFormat::int8: return "int8";
  }
  return "unknown";
}

std::size_t wire_bytes(WireFormat format, std::size_t floats) {
  switch (format) {
    case WireFormat::fp32: return floats * 4;
    case WireFormat::bf16: return floats * 2;
    case WireFormat::int8: return floats + 4 * ((floats + kInt8BlockFloats - 1) / kInt8BlockFloats);
  }
  return 0;
}

void encode_wire(WireFormat format, std::span<const float> in, std::span<float> residual, std::span<std::byte> out) {
  switch (format) {
    case WireFormat::fp32:
      if (residual.empty()) {
        std::memcpy(out.data(), in.data(), in.size_bytes());
      } else {
        // Nothing is dropped: what was kept goes out now.
        for (std::size_t t = 0; t < in.size(); ++t) {
          const float x = in[t] + residual[t];
          std::memcpy(out.data() + 4 * t, &x, 4);
          residual[t] = 0;
        }
      }
      return;
    case WireFormat::bf16: {
      // Through an aligned buffer: `out` need not be 2-byte aligned.
      std::uint16_t halves[kStagedFloats];
      for (std::size_t from = 0; from < in.size(); from += kStagedFloats) {
        const std::size_t n = std::min(kStagedFloats, in.size() - from);
        bf16_run(n, in.data() + from, residual.empty() ? nullptr : residual.data() + from, halves);
        std::memcpy(out.data() + 2 * from, halves, 2 * n);
      }
      return;
    }
    case WireFormat::int8: encode_int8(in, residual, out); return;
  }
}

Status decode_wire(WireFormat format, std::span<const std::byte> in, std::span<float> out) {
  const std::size_t expected = wire_bytes(format, out.size());
  if (format != WireFormat::fp32 && format != WireFormat::bf16 && format != WireFormat::int8)
    return malformed("unknown wire format " + std::to_string(static_cast<int>(format)));
  if (in.size() != expected)
    return malformed(std::string(wire_format_name(format)) + " payload of " + std::to_string(in.size()) +
                     " bytes for " + std::to_string(out.size()) + " floats: expected " + std::to_string(expected));
  switch (format) {
    case WireFormat::fp32: std::memcpy(out.data(), in.data(), in.size()); break;
    case WireFormat::bf16: {
      std::uint16_t halves[kStagedFloats];
      for (std::size_t from = 0; from < out.size(); from += kStagedFloats) {
        const std::size_t n = std::min(kStagedFloats, out.size() - from);
        std::memcpy(halves, in.data() + 2 * from, 2 * n);
        bf16_decode_run(n, halves, out.data() + from);
      }
      break;
    }
    case WireFormat::int8: {
      const std::byte* at = in.data();
      for (std::size_t from = 0; from < out.size(); from += kInt8BlockFloats) {
        const std::size_t n = std::min(kInt8BlockFloats, out.size() - from);
        float scale;
        std::memcpy(&scale, at, sizeof scale);
        if (!std::isfinite(scale) || scale < 0)
          return malformed("int8 block at float " + std::to_string(from) + " has the scale " +
                           std::to_string(scale) + ": expected a finite number >= 0");
        if (dequantize_run(n, reinterpret_cast<const std::int8_t*>(at + sizeof scale), scale, out.data() + from) <
            -127)
          return malformed("int8 block at float " + std::to_string(from) + " holds -128: expected [-127, 127]");
        at += sizeof scale + n;
      }
      break;
    }
  }
  return {};
}

}  // namespace gridtrain::allreduce
