#pragma once
// A TCP socket on a loopback port the system picked, for tests that need a port: one nothing listens on (close
// it), one that accepts and never speaks (listen on it), or one to hand a node.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace gridtrain::testing {

// Bound to a port of 127.0.0.1 the system picked, not listening yet; the caller closes `fd`.
struct LoopbackSocket {
  int fd = -1;
  std::uint16_t port = 0;
};

inline LoopbackSocket bind_loopback() {
  LoopbackSocket out;
  out.fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(out.fd >= 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(out.fd, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
  socklen_t length = sizeof at;
  REQUIRE(::getsockname(out.fd, reinterpret_cast<sockaddr*>(&at), &length) == 0);
  out.port = ntohs(at.sin_port);
  return out;
}

// A port of 127.0.0.1 that nothing listens on now: the system's pick, its socket closed.
inline std::uint16_t free_loopback_port() {
  const LoopbackSocket picked = bind_loopback();
  ::close(picked.fd);
  return picked.port;
}

}  // namespace gridtrain::testing
