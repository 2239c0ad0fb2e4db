#pragma once
// The cluster token: a shared secret in a file (cluster.token_file). A joining node proves it knows the token
// without sending it: the proof is HMAC-SHA-256 (OpenSSL) keyed with the token over the node's id, so a proof seen
// on the wire is good only for that node id (and the GridMaster refuses an id that is already a member).

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

// Lowercase hex of HMAC-SHA-256(key = token, message = "gridtrain-join/" + node id as 8 little-endian bytes).
// "" when the token is "" (a cluster without a token).
std::string token_proof(std::string_view token, std::uint64_t node_id);

// Whether `proof` is token_proof(token, node_id), compared in constant time.
bool token_proof_matches(std::string_view token, std::uint64_t node_id, std::string_view proof);

// HMAC-SHA-256(key = token, message): the data plane's handshake MAC (dataplane/handshake.hpp). An empty token is
// an empty key: nodes of a cluster without a token still agree.
std::array<std::byte, 32> token_mac(std::string_view token, std::span<const std::byte> message);

}  // namespace gridtrain::actors
