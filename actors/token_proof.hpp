#pragma once
// The cluster token: a shared secret in a file (cluster.token_file). It never leaves the node and is never
// logged: a joining node proves it knows the token with HMAC-SHA-256 (OpenSSL) keyed with the token over its node
// id and a nonce the GridMaster chose for this one Join (JoinChallenge), so a proof seen on the wire is good for
// that node id once, and never again (docs/design.md, "Joining with a challenge").

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/result.hpp"

namespace gridtrain::actors {

// The token file's content, trailing whitespace (a final newline) removed; "" for an empty path (no token).
Result<std::string> read_token(const std::string& path);

// Lowercase hex of HMAC-SHA-256(key = token, message = "gridtrain-join/" + node id and nonce, each as 8
// little-endian bytes). "" when the token is "" (a cluster without a token).
std::string token_proof(std::string_view token, std::uint64_t node_id, std::uint64_t nonce);

// Whether `proof` is token_proof(token, node_id, nonce), compared in constant time.
bool token_proof_matches(std::string_view token, std::uint64_t node_id, std::uint64_t nonce, std::string_view proof);

// A nonce for a JoinChallenge: 64 bits from the kernel's generator, never 0 (0 means "no challenge answered yet").
std::uint64_t make_join_nonce();

// HMAC-SHA-256(key = token, message): the data plane's handshake MAC (dataplane/handshake.hpp). An empty token is
// an empty key: nodes of a cluster without a token still agree.
std::array<std::byte, 32> token_mac(std::string_view token, std::span<const std::byte> message);

}  // namespace gridtrain::actors
