#include "config/host_port.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace gridtrain::config {

std::string HostPort::to_string() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<HostPort> parse_host_port(std::string_view text) {
  const std::string found = "'" + printable(text) + "'";
  auto fail = [&](std::string what) { return Error{.message = "expected " + what + ", found " + found}; };
  if (text.empty()) return Error{.message = "expected host:port, found an empty string"};
  if (std::any_of(text.begin(), text.end(), [](unsigned char c) { return std::isspace(c) || std::iscntrl(c); }))
    return fail("host:port without spaces");

  std::string_view host;
  std::string_view port;
  if (text.front() == '[') {
    // IPv6 literals carry colons of their own, so they are bracketed (RFC 3986).
    const auto close = text.find(']');
    if (close == std::string_view::npos) return fail("[ipv6]:port with a closing ']'");
    host = text.substr(1, close - 1);
    if (close + 1 >= text.size() || text[close + 1] != ':') return fail("[ipv6]:port");
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return fail("host:port (no ':port')");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return fail("host:port, with an IPv6 host in brackets");
  }
  if (host.empty()) return fail("a host before ':port'");
  if (host.find_first_of("[]") != std::string_view::npos) return fail("host:port");

  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc{} || end != port.data() + port.size() || value > 65535)
    return fail("a port in 0..65535 after ':'");
  return HostPort{std::string(host), static_cast<std::uint16_t>(value)};
}

Result<std::vector<HostPort>> parse_host_port_list(std::string_view text) {
  std::vector<HostPort> out;
  std::size_t item = 0;
  for (std::size_t begin = 0;; ++item) {
    const std::size_t comma = text.find(',', begin);
    const std::string_view one = text.substr(begin, comma == std::string_view::npos ? text.npos : comma - begin);
    auto parsed = parse_host_port(one);
    if (!parsed) return Error{.message = "item " + std::to_string(item + 1) + ": " + parsed.error().message};
    if (std::find(out.begin(), out.end(), parsed.value()) != out.end())
      return Error{.message = "item " + std::to_string(item + 1) + ": " + parsed.value().to_string() +
                              " is listed twice"};
    out.push_back(std::move(parsed).value());
    if (comma == std::string_view::npos) return out;
    begin = comma + 1;
  }
}

}  // namespace gridtrain::config
