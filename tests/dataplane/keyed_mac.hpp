#pragma once
// A stand-in for HMAC-SHA-256 under a cluster token, for the data plane's own tests (the real one lives in
// actors/token_proof, which this library does not see): another key gives another MAC, which is all the
// handshake needs of it here.

#include <cstddef>
#include <cstdint>
#include <span>

#include "dataplane/handshake.hpp"

namespace gridtrain::testing {

inline dataplane::MacFunction keyed(std::uint8_t key) {
  return [key](std::span<const std::byte> message) {
    dataplane::Mac mac{};
    for (std::size_t i = 0; i < message.size(); ++i)
      mac[i % mac.size()] ^= static_cast<std::byte>(std::to_integer<std::uint8_t>(message[i]) * 31 + key + i);
    return mac;
  };
}

}  // namespace gridtrain::testing
