#include "actors/token_proof.hpp"

#include <cstring>
#include <fstream>
#include <sstream>

namespace gridtrain::actors {

namespace {

constexpr std::array<std::uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

class Sha256 {
 public:
  void add(std::string_view data) {
    for (unsigned char c : data) {
      block_[fill_++] = c;
      if (fill_ == 64) compress();
    }
    bits_ += std::uint64_t{data.size()} * 8;
  }

  std::array<std::uint8_t, 32> finish() {
    const std::uint64_t bits = bits_;
    block_[fill_++] = 0x80;
    if (fill_ > 56) {
      while (fill_ < 64) block_[fill_++] = 0;
      compress();
    }
    while (fill_ < 56) block_[fill_++] = 0;
    for (int i = 7; i >= 0; --i) block_[fill_++] = static_cast<std::uint8_t>(bits >> (8 * i));
    compress();
    std::array<std::uint8_t, 32> out{};
    for (int i = 0; i < 8; ++i)
      for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<std::uint8_t>(h_[i] >> (24 - 8 * b));
    return out;
  }

 private:
  void compress() {
    std::uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = std::uint32_t{block_[4 * i]} << 24 | std::uint32_t{block_[4 * i + 1]} << 16 |
             std::uint32_t{block_[4 * i + 2]} << 8 | std::uint32_t{block_[4 * i + 3]};
    for (int i = 16; i < 64; ++i) {
      const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      const std::uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[i] + w[i];
      const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += b;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
    fill_ = 0;
  }

  std::uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                         0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::uint8_t block_[64] = {};
  std::size_t fill_ = 0;
  std::uint64_t bits_ = 0;
};

std::string_view as_view(const std::array<std::uint8_t, 32>& d) {
  return {reinterpret_cast<const char*>(d.data()), d.size()};
}

}  // namespace

std::array<std::uint8_t, 32> sha256(std::string_view data) {
  Sha256 h;
  h.add(data);
  return h.finish();
}

std::array<std::uint8_t, 32> hmac_sha256(std::string_view key, std::string_view message) {
  // RFC 2104: a key longer than the block is hashed first; then H((K ^ opad) || H((K ^ ipad) || m)).
  std::array<std::uint8_t, 64> k{};
  if (key.size() > k.size()) {
    const auto hashed = sha256(key);
    std::memcpy(k.data(), hashed.data(), hashed.size());
  } else {
    std::memcpy(k.data(), key.data(), key.size());
  }
  std::string ipad(64, '\0'), opad(64, '\0');
  for (std::size_t i = 0; i < 64; ++i) {
    ipad[i] = static_cast<char>(k[i] ^ 0x36);
    opad[i] = static_cast<char>(k[i] ^ 0x5c);
  }
  Sha256 inner;
  inner.add(ipad);
  inner.add(message);
  const auto inner_digest = inner.finish();
  Sha256 outer;
  outer.add(opad);
  outer.add(as_view(inner_digest));
  return outer.finish();
}

std::string to_hex(const std::array<std::uint8_t, 32>& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (std::uint8_t b : digest) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

config::Result<std::string> read_token(const std::string& path) {
  if (path.empty()) return std::string{};
  std::ifstream in(path, std::ios::binary);
  if (!in) return config::Error{.source = path, .key = "cluster.token_file", .message = "cannot read the token file"};
  std::ostringstream text;
  text << in.rdbuf();
  std::string token = text.str();
  // Editors and `echo` add a final newline; it must not make two copies of one secret differ.
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ' || token.back() == '\t'))
    token.pop_back();
  if (token.empty())
    return config::Error{.source = path, .key = "cluster.token_file", .message = "the token file is empty"};
  return token;
}

std::string token_proof(std::string_view token, std::uint64_t node_id) {
  if (token.empty()) return {};
  std::string message = "gridtrain-join/";
  for (int i = 0; i < 8; ++i) message.push_back(static_cast<char>(node_id >> (8 * i)));
  return to_hex(hmac_sha256(token, message));
}

bool token_proof_matches(std::string_view token, std::uint64_t node_id, std::string_view proof) {
  const std::string expected = token_proof(token, node_id);
  if (proof.size() != expected.size()) return false;
  // No early exit: the time taken must not tell how many leading characters were right.
  unsigned char diff = 0;
  for (std::size_t i = 0; i < expected.size(); ++i)
    diff |= static_cast<unsigned char>(expected[i] ^ proof[i]);
  return diff == 0;
}

}  // namespace gridtrain::actors
