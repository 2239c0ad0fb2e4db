#pragma once
// A host:port address, as written in configs and on the command line (--seed, --listen).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace gridtrain::config {

struct HostPort {
  std::string host;        // non-empty; a name, an IPv4 address, or an IPv6 address without brackets
  std::uint16_t port = 0;  // 0 = let the system pick a free port (when listening)

  // "host:port", with brackets around an IPv6 host: "[::1]:8080".
  std::string to_string() const;

  bool operator==(const HostPort&) const = default;
};

// Parses "host:port" or "[ipv6]:port". The Error carries only a message (what was expected and what was found);
// the caller adds the source and key it knows.
Result<HostPort> parse_host_port(std::string_view text);

// Parses a comma-separated list of host:ports, "a:1,b:2,[::1]:3", in order; at least one, no duplicates. An
// error names the item (its position and text) and what was wrong with it.
Result<std::vector<HostPort>> parse_host_port_list(std::string_view text);

}  // namespace gridtrain::config
