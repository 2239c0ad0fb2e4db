// The wire formats (allreduce/wire_codec.hpp): exact round trips where a value is representable, the error bounds
// where it is not, the error feedback's sum, and payloads a peer could get wrong.

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "allreduce/wire_codec.hpp"

using namespace gridtrain::allreduce;

namespace {

std::vector<float> round_trip(WireFormat format, const std::vector<float>& in, std::vector<float>* residual = nullptr) {
  std::vector<std::byte> wire(wire_bytes(format, in.size()));
  encode_wire(format, in, residual ? std::span<float>(*residual) : std::span<float>(), wire);
  std::vector<float> out(in.size());
  REQUIRE(decode_wire(format, wire, out).ok());
  return out;
}

std::vector<float> random_floats(std::size_t n, float spread, unsigned seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> v(n);
  for (float& x : v) x = normal(random);
  return v;
}

}  // namespace

TEST_CASE("the formats' sizes: 4, 2 and 1 byte a float, int8 with a 4-byte scale per block") {
  CHECK(wire_bytes(WireFormat::fp32, 1000) == 4000);
  CHECK(wire_bytes(WireFormat::bf16, 1000) == 2000);
  CHECK(wire_bytes(WireFormat::int8, 1000) == 1004);
  CHECK(wire_bytes(WireFormat::int8, kInt8BlockFloats) == kInt8BlockFloats + 4);
  CHECK(wire_bytes(WireFormat::int8, kInt8BlockFloats + 1) == kInt8BlockFloats + 1 + 8);
  // 64 MB of floats: int8 sends 0.2505 of fp32's bytes.
  CHECK(static_cast<double>(wire_bytes(WireFormat::int8, 1 << 24)) / wire_bytes(WireFormat::fp32, 1 << 24) < 0.251);
}

TEST_CASE("representable values come back exactly") {
  SUBCASE("fp32: every float, NaN and infinity included") {
    const std::vector<float> in{0.0f, -0.0f, 1e-38f, 3.4e38f, -1.5f, std::numeric_limits<float>::infinity()};
    CHECK(round_trip(WireFormat::fp32, in) == in);
  }
  SUBCASE("bf16: floats whose lower 16 bits are zero") {
    std::vector<float> in;
    for (float x : {0.0f, 1.0f, -2.5f, 0.15625f, 65536.0f, -1.0f / 1024}) in.push_back(x);
    CHECK(round_trip(WireFormat::bf16, in) == in);
  }
  SUBCASE("int8: multiples of the scale, in blocks of their own scales") {
    // Block 0: k/64, largest 127/64 (scale 1/64); block 1: k/2, largest 127/2 (scale 1/2); a short last block.
    std::vector<float> in(2 * kInt8BlockFloats + 5);
    for (std::size_t t = 0; t < in.size(); ++t) {
      const int k = static_cast<int>(t % 255) - 127;
      in[t] = t < kInt8BlockFloats ? k / 64.0f : k / 2.0f;
    }
    in[0] = 127 / 64.0f;
    in[kInt8BlockFloats] = -127 / 2.0f;
    in[2 * kInt8BlockFloats] = 127 / 2.0f;
    CHECK(round_trip(WireFormat::int8, in) == in);
    const std::vector<float> zeros(10, 0.0f);
    CHECK(round_trip(WireFormat::int8, zeros) == zeros);
  }
}

TEST_CASE("the error stays within its bound: half a step of the format") {
  const std::vector<float> in = random_floats(3 * kInt8BlockFloats + 77, 0.05f, 1);
  SUBCASE("bf16: 2^-8 of each value (8 significant bits, rounded to nearest)") {
    const std::vector<float> out = round_trip(WireFormat::bf16, in);
    for (std::size_t t = 0; t < in.size(); ++t) CHECK(std::fabs(out[t] - in[t]) <= std::ldexp(std::fabs(in[t]), -8));
  }
  SUBCASE("int8: half the block's scale") {
    const std::vector<float> out = round_trip(WireFormat::int8, in);
    for (std::size_t from = 0; from < in.size(); from += kInt8BlockFloats) {
      const std::size_t to = std::min(in.size(), from + kInt8BlockFloats);
      float largest = 0;
      for (std::size_t t = from; t < to; ++t) largest = std::max(largest, std::fabs(in[t]));
      const float half_step = largest / 127 / 2 * (1 + 1e-5f);
      for (std::size_t t = from; t < to; ++t) CHECK(std::fabs(out[t] - in[t]) <= half_step);
    }
  }
}

TEST_CASE("error feedback: what was dropped goes out later, and the sums agree") {
  for (WireFormat format : {WireFormat::bf16, WireFormat::int8, WireFormat::fp32}) {
    CAPTURE(wire_format_name(format));
    const std::size_t n = kInt8BlockFloats + 300;
    std::vector<float> residual(n, 0.0f);
    std::vector<double> sent(n, 0.0), given(n, 0.0);
    for (unsigned round = 0; round < 50; ++round) {
      // Small moves around a large value, as a model's floats between rounds; one float far larger, which sets
      // its block's scale.
      std::vector<float> in = random_floats(n, 0.001f, round + 10);
      for (std::size_t t = 0; t < n; ++t) in[t] += 0.3f;
      in[7] = 5.0f;
      const std::vector<float> before = residual;
      const std::vector<float> out = round_trip(format, in, &residual);
      for (std::size_t t = 0; t < n; ++t) {
        // Each round: what went out plus what is kept is what was given plus what was kept before.
        CHECK(static_cast<double>(out[t]) + residual[t] ==
              doctest::Approx(static_cast<double>(in[t]) + before[t]).epsilon(1e-6));
        sent[t] += out[t];
        given[t] += in[t];
      }
    }
    // Over the rounds: nothing lost but the residual now, at most half a step.
    for (std::size_t t = 0; t < n; ++t) {
      CHECK(std::fabs(given[t] - sent[t] - residual[t]) < 1e-4);
      CHECK(std::fabs(residual[t]) <= (format == WireFormat::int8 ? 5.0 / 127 : 0.01));
    }
  }
}

TEST_CASE("a NaN or infinity: bf16 carries it, int8 writes a block that is refused, and no residual keeps it") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> residual(4, 0.25f);
  std::vector<std::byte> wire(wire_bytes(WireFormat::bf16, 4));
  const std::vector<float> in{1, nan, -inf, 2};
  encode_wire(WireFormat::bf16, in, residual, wire);
  std::vector<float> out(4);
  REQUIRE(decode_wire(WireFormat::bf16, wire, out).ok());
  CHECK(std::isnan(out[1]));
  CHECK(out[2] == -inf);
  CHECK(residual[1] == 0.0f);
  CHECK(residual[2] == 0.0f);

  std::vector<float> kept(4, 0.25f);
  std::vector<std::byte> int8(wire_bytes(WireFormat::int8, 4));
  encode_wire(WireFormat::int8, in, kept, int8);
  const gridtrain::Status refused = decode_wire(WireFormat::int8, int8, out);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("scale") != std::string::npos);
  CHECK(kept == std::vector<float>(4, 0.0f));
}

TEST_CASE("payloads a peer could get wrong are refused, saying what is wrong") {
  std::vector<float> out(10);
  SUBCASE("a length that does not match the floats") {
    const std::vector<std::byte> short_payload(wire_bytes(WireFormat::int8, 10) - 1);
    const gridtrain::Status st = decode_wire(WireFormat::int8, short_payload, out);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().message == "int8 payload of 13 bytes for 10 floats: expected 14");
    CHECK_FALSE(decode_wire(WireFormat::bf16, std::vector<std::byte>(21), out).ok());
    CHECK_FALSE(decode_wire(WireFormat::fp32, std::vector<std::byte>(39), out).ok());
  }
  SUBCASE("an int8 scale that is infinite, NaN or negative") {
    for (float scale : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), -1.0f}) {
      std::vector<std::byte> payload(14);
      std::memcpy(payload.data(), &scale, 4);
      const gridtrain::Status st = decode_wire(WireFormat::int8, payload, out);
      REQUIRE_FALSE(st.ok());
      CHECK(st.error().message.find("int8 block at float 0 has the scale") == 0);
    }
  }
  SUBCASE("an int8 value of -128, which no encoder writes") {
    std::vector<std::byte> payload(14);
    const float scale = 1;
    std::memcpy(payload.data(), &scale, 4);
    payload[9] = std::byte{0x80};
    const gridtrain::Status st = decode_wire(WireFormat::int8, payload, out);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().message == "int8 block at float 0 holds -128: expected [-127, 127]");
  }
  SUBCASE("an unknown format") {
    CHECK_FALSE(decode_wire(static_cast<WireFormat>(9), std::vector<std::byte>(40), out).ok());
  }
}

TEST_CASE("every node that decodes the same bytes gets the same floats") {
  // The owner encodes the mean once; every receiver, and the owner itself, applies what the bytes say.
  const std::vector<float> mean = random_floats(5000, 0.2f, 3);
  std::vector<std::byte> wire(wire_bytes(WireFormat::int8, mean.size()));
  encode_wire(WireFormat::int8, mean, {}, wire);
  std::vector<float> a(mean.size()), b(mean.size());
  REQUIRE(decode_wire(WireFormat::int8, wire, a).ok());
  const std::vector<std::byte> copy = wire;
  REQUIRE(decode_wire(WireFormat::int8, copy, b).ok());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
