#pragma once
// What a stranger or an intruder has: a plain TCP connection to a node's port, and a look at this process's
// resident memory (the node under test runs in it).
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

namespace gridtrain::testing {

// A plain TCP connection to 127.0.0.1:port, closed with the object; reads wait 5 s at most. `from`: the local
// address it comes from (any of 127.0.0.0/8 is this machine), as a stranger on another machine would.
struct RawConnection {
  explicit RawConnection(std::uint16_t port, const char* from = nullptr) : fd(::socket(AF_INET, SOCK_STREAM, 0)) {
    if (from) {
      sockaddr_in local{};
      local.sin_family = AF_INET;
      REQUIRE(::inet_pton(AF_INET, from, &local.sin_addr) == 1);
      REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) == 0);
    }
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_port = htons(port);
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
    timeval limit{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  }
  ~RawConnection() { ::close(fd); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;
  void send(std::span<const std::byte> bytes) const {
    REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
  }
  // Exactly N bytes, or fewer if the other side closed the connection first.
  std::vector<std::byte> receive(std::size_t n) const {
    std::vector<std::byte> out(n);
    std::size_t done = 0;
    while (done < n) {
      const ssize_t got = ::recv(fd, out.data() + done, n - done, 0);
      if (got <= 0) break;
      done += static_cast<std::size_t>(got);
    }
    out.resize(done);
    return out;
  }
  int fd;
};

// This process's resident memory, in KiB (VmRSS).
inline std::size_t resident_kb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6));
  return 0;
}

}  // namespace gridtrain::testing
