#include "actors/token_proof.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "dataplane/handshake.hpp"

namespace gridtrain::actors {

Result<std::string> read_token(const std::string& path) {
  if (path.empty()) return std::string{};
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{.source = path, .key = "cluster.token_file", .message = "cannot read the token file"};
  std::ostringstream text;
  text << in.rdbuf();
  std::string token = text.str();
  // Editors and `echo` add a final newline; it must not make two copies of one secret differ.
  while (!token.empty() && std::string_view(" \t\r\n").find(token.back()) != std::string_view::npos) token.pop_back();
  if (token.empty()) return Error{.source = path, .key = "cluster.token_file", .message = "the token file is empty"};
  return token;
}

std::string token_proof(std::string_view token, std::uint64_t node_id, std::uint64_t nonce) {
  if (token.empty()) return {};
  std::string message = "gridtrain-join/";
  for (int i = 0; i < 8; ++i) message.push_back(static_cast<char>(node_id >> (8 * i)));
  for (int i = 0; i < 8; ++i) message.push_back(static_cast<char>(nonce >> (8 * i)));
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

bool token_proof_matches(std::string_view token, std::uint64_t node_id, std::uint64_t nonce, std::string_view proof) {
  const std::string expected = token_proof(token, node_id, nonce);
  // The time taken must not tell how many leading characters were right.
  return proof.size() == expected.size() && CRYPTO_memcmp(expected.data(), proof.data(), expected.size()) == 0;
}

std::uint64_t make_join_nonce() {
  // The kernel's generator, as the handshakes use. Not RAND_bytes: OpenSSL 3 keeps a generator per thread that
  // calls it, freed only when that thread ends; the GridMaster runs on a CAF thread that may outlive OpenSSL's
  // cleanup at exit, which then showed as a leak (LeakSanitizer, 944 bytes in 2 objects).
  std::uint64_t nonce = 0;
  while (nonce == 0) {
    const dataplane::Nonce random = dataplane::make_nonce();
    std::memcpy(&nonce, random.data(), sizeof nonce);
  }
  return nonce;
}

std::array<std::byte, 32> token_mac(std::string_view token, std::span<const std::byte> message) {
  std::array<std::byte, 32> mac{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
       reinterpret_cast<unsigned char*>(mac.data()), &length);
  return mac;
}

}  // namespace gridtrain::actors
