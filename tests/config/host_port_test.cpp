#include <doctest/doctest.h>

#include <string>

#include "config/host_port.hpp"
#include "tests/base/require_ok.hpp"

using gridtrain::config::HostPort;
using gridtrain::config::parse_host_port;
using gridtrain::config::parse_host_port_list;

TEST_CASE("host:port parses into host and port, and prints back the same") {
  struct Good {
    std::string text;
    HostPort expected;
  };
  const Good cases[] = {
      {"127.0.0.1:0", {"127.0.0.1", 0}},
      {"localhost:65535", {"localhost", 65535}},
      {"node-7.example.org:8080", {"node-7.example.org", 8080}},
      {"[::1]:9000", {"::1", 9000}},
      {"[fe80::1%eth0]:1", {"fe80::1%eth0", 1}},
  };
  for (const Good& c : cases) {
    CAPTURE(c.text);
    auto r = parse_host_port(c.text);
    REQUIRE_OK(r);
    CHECK(r.value() == c.expected);
    CHECK(r.value().to_string() == c.text);
  }
}

TEST_CASE("a malformed host:port is an error that quotes what was found") {
  struct Bad {
    std::string text;
    std::string fragment;
  };
  const Bad cases[] = {
      {"", "found an empty string"},
      {"localhost", "no ':port'"},
      {":8080", "a host before ':port'"},
      {"localhost:", "a port in 0..65535"},
      {"localhost:65536", "a port in 0..65535"},
      {"localhost:-1", "a port in 0..65535"},
      {"localhost:+80", "a port in 0..65535"},
      {"localhost:http", "a port in 0..65535"},
      {"localhost:80x", "a port in 0..65535"},
      {"::1:80", "IPv6 host in brackets"},
      {"[::1]80", "[ipv6]:port"},
      {"[::1:80", "closing ']'"},
      {"[]:80", "a host before ':port'"},
      {"local host:80", "without spaces"},
  };
  for (const Bad& c : cases) {
    CAPTURE(c.text);
    auto r = parse_host_port(c.text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().source.empty());  // the caller knows where the text came from
    CHECK(r.error().message.find(c.fragment) != std::string::npos);
    if (!c.text.empty()) CHECK(r.error().message.find("found '" + c.text + "'") != std::string::npos);
  }
}

TEST_CASE("a seed list parses in order; a bad item, an empty item or a repeat is named by its position") {
  auto one = parse_host_port_list("a:1");
  REQUIRE_OK(one);
  CHECK(one.value() == std::vector<HostPort>{{"a", 1}});
  auto three = parse_host_port_list("b:2,[::1]:3,a:1");
  REQUIRE_OK(three);
  CHECK(three.value() == std::vector<HostPort>{{"b", 2}, {"::1", 3}, {"a", 1}});

  struct Bad {
    std::string text, fragment;
  };
  const std::vector<Bad> cases{
      {"", "item 1: expected host:port, found an empty string"},
      {"a:1,", "item 2: expected host:port, found an empty string"},
      {"a:1,,b:2", "item 2:"},
      {"a:1,b", "item 2: expected host:port (no ':port'), found 'b'"},
      {"a:1, b:2", "item 2: expected host:port without spaces"},
      {"a:1,b:2,a:1", "item 3: a:1 is listed twice"},
  };
  for (const Bad& c : cases) {
    CAPTURE(c.text);
    auto r = parse_host_port_list(c.text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find(c.fragment) != std::string::npos);
  }
}
