#include "app/listen_address.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>

namespace gridtrain::app {

namespace {

bool is_wildcard(const std::string& host) {
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return v4.s_addr == htonl(INADDR_ANY);
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_UNSPECIFIED(&v6);
  return false;
}

// Loopback as written: a literal loopback address, or "localhost". Another name may resolve to a loopback address
// here (Debian maps the host's own name to 127.0.1.1) and still to this machine's address on the others.
bool is_loopback(const std::string& host) {
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return host == "localhost";
}

// Whether this machine holds `address`: loopback, or an address a socket can be bound to here.
bool held_here(const sockaddr* address, socklen_t length) {
  if (address->sa_family == AF_INET) {
    if ((ntohl(reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr) >> 24) == 127) return true;
  } else if (address->sa_family == AF_INET6) {
    if (IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr)) return true;
  } else {
    return false;
  }
  const int fd = ::socket(address->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;  // no way to tell: assume the best
  // Port 0 of the resolved address (getaddrinfo without a service gives port 0).
  const bool bound = ::bind(fd, address, length) == 0;
  ::close(fd);
  return bound;
}

// True when `seed` resolves and none of its addresses is this machine's; false when it is here, or unknown.
bool elsewhere(const config::HostPort& seed) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(seed.host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return false;
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> hold(found, &::freeaddrinfo);
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next)
    if (held_here(a->ai_addr, a->ai_addrlen)) return false;
  return true;
}

}  // namespace

Status check_listen_address(const config::HostPort& listen, const Error& source,
                            const std::vector<config::HostPort>& seeds) {
  auto error = [&](std::string message) {
    Error e = source;
    e.message = std::move(message);
    return e;
  };
  const std::string address = listen.to_string();
  if (is_wildcard(listen.host))
    return error(address + ": the listen address is the one this node tells the others to dial, and " + listen.host +
                 " (any address) reaches no other machine: give this machine's address as they reach it, e.g. "
                 "10.0.0.5:" + std::to_string(listen.port) + " (127.0.0.1 for a cluster on this machine alone)");
  if (!is_loopback(listen.host)) return {};
  for (const config::HostPort& seed : seeds)
    if (elsewhere(seed))
      return error(address + ": a loopback address, but the seed " + seed.to_string() +
                   " is on another machine, whose nodes could not reach this one: give this machine's address as "
                   "they reach it");
  return {};
}

}  // namespace gridtrain::app
