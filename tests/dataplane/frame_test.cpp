// The frame header on the wire: what encode() writes, decode_frame_header() reads back, and what it refuses.
#include <doctest/doctest.h>

#include <array>

#include "dataplane/frame.hpp"

using namespace gridtrain::dataplane;

namespace {

FrameHeader sample() {
  FrameHeader h;
  h.kind = FrameKind::reduced;
  h.key = {.epoch = 0x0102030405060708, .layout_version = 9, .dim = 2, .line = 0xfffffffffffffff0, .round = 77};
  h.from = 3;
  h.offset = 1u << 30;
  h.length = 65536;
  h.count = 4;
  return h;
}

using Bytes = std::array<std::byte, kFrameHeaderBytes>;

Bytes encoded(const FrameHeader& h) {
  Bytes b{};
  encode(h, b);
  return b;
}

}  // namespace

TEST_CASE("a frame header round-trips, little-endian at the documented offsets") {
  const FrameHeader h = sample();
  const Bytes b = encoded(h);
  CHECK(b[0] == std::byte{'G'});
  CHECK(b[3] == std::byte{'F'});
  CHECK(b[4] == std::byte{2});
  CHECK(b[8] == std::byte{0x08});  // epoch, least significant byte first
  CHECK(b[15] == std::byte{0x01});
  CHECK(b[44] == std::byte{3});  // from
  CHECK(b[58] == std::byte{1});  // length 65536 = 0x00010000
  auto decoded = decode_frame_header(b);
  REQUIRE(decoded.ok());
  CHECK(decoded.value() == h);
  CHECK(decoded.value().payload_bytes() == 65536 * 4);
}

TEST_CASE("the wire format rides at offset 5 and sizes the payload") {
  FrameHeader h = sample();
  h.wire = gridtrain::allreduce::WireFormat::int8;
  const Bytes b = encoded(h);
  CHECK(b[5] == std::byte{2});
  auto decoded = decode_frame_header(b);
  REQUIRE(decoded.ok());
  CHECK(decoded.value() == h);
  CHECK(decoded.value().payload_bytes() == 65536 + 4 * 32);  // a byte a float, a 4-byte scale per 2,048
  h.wire = gridtrain::allreduce::WireFormat::bf16;
  CHECK(decode_frame_header(encoded(h)).value().payload_bytes() == 65536 * 2);
}

TEST_CASE("a header that is not a frame, or a frame that cannot be one, is refused with why") {
  auto refused = [](Bytes b, const char* why) {
    auto decoded = decode_frame_header(b);
    REQUIRE_FALSE(decoded.ok());
    CHECK(decoded.error().message.find(why) != std::string::npos);
  };
  Bytes b = encoded(sample());
  b[1] = std::byte{'X'};
  refused(b, "magic");
  b = encoded(sample());
  b[4] = std::byte{7};
  refused(b, "unknown kind");
  b = encoded(sample());
  b[6] = std::byte{1};
  refused(b, "reserved");
  b = encoded(sample());
  b[5] = std::byte{3};
  refused(b, "unknown wire format");
  FrameHeader compressed_delta = sample();
  compressed_delta.kind = FrameKind::delta;
  compressed_delta.wire = gridtrain::allreduce::WireFormat::bf16;
  refused(encoded(compressed_delta), "delta frame in a compressed");
  FrameHeader h = sample();
  h.length = 0;
  refused(encoded(h), "empty chunk");
  h = sample();
  h.count = 0;
  refused(encoded(h), "no contributions");
  h = sample();
  h.kind = FrameKind::scatter;
  refused(encoded(h), "count other than 1");
  h.count = 1;
  CHECK(decode_frame_header(encoded(h)).ok());
  refused(Bytes{}, "magic");
}
