#include "dataplane/frame.hpp"

#include "dataplane/wire.hpp"

namespace gridtrain::dataplane {

namespace {
constexpr std::uint32_t kMagic = 0x46445447;  // "GTDF" read as a little-endian u32
}  // namespace

void encode(const FrameHeader& h, std::span<std::byte, kFrameHeaderBytes> out) {
  wire::put<std::uint32_t>(out, 0, kMagic);
  wire::put<std::uint8_t>(out, 4, static_cast<std::uint8_t>(h.kind));
  wire::put<std::uint8_t>(out, 5, static_cast<std::uint8_t>(h.wire));
  wire::put<std::uint16_t>(out, 6, 0);
  wire::put<std::uint64_t>(out, 8, h.key.epoch);
  wire::put<std::uint64_t>(out, 16, h.key.layout_version);
  wire::put<std::uint64_t>(out, 24, h.key.line);
  wire::put<std::uint64_t>(out, 32, h.key.round);
  wire::put<std::uint32_t>(out, 40, h.key.dim);
  wire::put<std::uint32_t>(out, 44, h.from);
  wire::put<std::uint64_t>(out, 48, h.offset);
  wire::put<std::uint32_t>(out, 56, h.length);
  wire::put<std::uint32_t>(out, 60, h.count);
}

Result<FrameHeader> decode_frame_header(std::span<const std::byte, kFrameHeaderBytes> in) {
  if (wire::get<std::uint32_t>(in, 0) != kMagic) return Error{.message = "not a data-plane frame (wrong magic)"};
  const auto kind = wire::get<std::uint8_t>(in, 4);
  if (kind < static_cast<std::uint8_t>(FrameKind::scatter) || kind > static_cast<std::uint8_t>(FrameKind::delta))
    return Error{.message = "frame of unknown kind " + std::to_string(kind)};
  const auto format = wire::get<std::uint8_t>(in, 5);
  if (format > static_cast<std::uint8_t>(allreduce::WireFormat::int8))
    return Error{.message = "frame of unknown wire format " + std::to_string(format)};
  if (wire::get<std::uint16_t>(in, 6) != 0) return Error{.message = "frame with reserved bytes set"};
  FrameHeader h;
  h.kind = static_cast<FrameKind>(kind);
  h.key.epoch = wire::get<std::uint64_t>(in, 8);
  h.key.layout_version = wire::get<std::uint64_t>(in, 16);
  h.key.line = wire::get<std::uint64_t>(in, 24);
  h.key.round = wire::get<std::uint64_t>(in, 32);
  h.key.dim = wire::get<std::uint32_t>(in, 40);
  h.from = wire::get<std::uint32_t>(in, 44);
  h.offset = wire::get<std::uint64_t>(in, 48);
  h.length = wire::get<std::uint32_t>(in, 56);
  h.count = wire::get<std::uint32_t>(in, 60);
  h.wire = static_cast<allreduce::WireFormat>(format);
  if (h.length == 0) return Error{.message = "frame with an empty chunk"};
  if (h.count == 0) return Error{.message = "frame averaging no contributions"};
  if (h.kind == FrameKind::scatter && h.count != 1) return Error{.message = "scatter frame with a count other than 1"};
  if (h.kind == FrameKind::delta && h.wire != allreduce::WireFormat::fp32)
    return Error{.message = "delta frame in a compressed wire format"};
  return h;
}

}  // namespace gridtrain::dataplane
