#pragma once
// A host:port address, as written in configs and on the command line (--seed, --listen).

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.hpp"

namespace gridtrain::config {

struct Endpoint {
  std::string host;        // non-empty; a name, an IPv4 address, or an IPv6 address without brackets
  std::uint16_t port = 0;  // 0 = let the system pick a free port (when listening)

  // "host:port", with brackets around an IPv6 host: "[::1]:8080".
  std::string to_string() const;

  bool operator==(const Endpoint&) const = default;
};

// Parses "host:port" or "[ipv6]:port". The Error carries only a message (what was expected and what was found);
// the caller adds the source and key it knows.
Result<Endpoint> parse_endpoint(std::string_view text);

}  // namespace gridtrain::config
