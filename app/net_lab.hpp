#pragma once
// NetLab: hosts in network namespaces of their own, cabled to a switch that can be split in two, for
// `gridnode chaos --partitions`. Nothing of it touches this machine's own network: every interface, address and
// route is made inside namespaces the lab creates, and the lab deletes them all (its destructor).
//
//   host i: namespace <tag>-h<i>, eth0 at <prefix>.<i+1>/24, cabled to the switch
//   switch: namespace <tag>-sw holding two bridges, side A (br0) and side B (br1), not joined: a host's cable is on
//           one of them. cut() moves hosts to side B, which splits the network in two; heal() moves them back.
//   observer: namespace <tag>-obs with a leg on each side (legA at <prefix>.250 on side A, legB at <prefix>.251 on side B), and a
//           route to each host through the leg on its side, so that the chaos command, which enters it, reaches
//           every host whatever the cut. It forwards nothing: a cut holds for the hosts.
//
// Root only (CAP_NET_ADMIN, and /var/run/netns). Not thread-safe.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace gridtrain::app {

class NetLab {
 public:
  // Creates the switch, the observer and `hosts` hosts. Error: not root, no `ip`, or a command that failed (with
  // its output).
  static Result<std::unique_ptr<NetLab>> create(std::size_t hosts);
  ~NetLab();

  NetLab(const NetLab&) = delete;
  NetLab& operator=(const NetLab&) = delete;

  std::size_t hosts() const { return hosts_; }
  // Host i's address (no port).
  std::string address(std::size_t host) const;
  // The program and the arguments that run `argv` in host i's namespace: `ip netns exec <ns> argv...`, which
  // execs, so the process keeps the PID it was started with.
  std::string exec_program() const { return ip_; }
  std::vector<std::string> exec_args(std::size_t host, const std::vector<std::string>& argv) const;
  // Moves the calling thread into the observer's namespace; threads it starts afterwards are there too. Call it
  // before any thread that should reach the hosts starts.
  Status enter_observer() const;
  // Side B holds exactly `side_b` (host indices) from now on; the rest are on side A.
  Status cut(const std::vector<std::size_t>& side_b);
  Status heal() { return cut({}); }
  const std::vector<bool>& on_side_b() const { return side_b_; }

 private:
  NetLab(std::string tag, std::string prefix, std::size_t hosts, std::string ip);
  Status ip(const std::vector<std::string>& args) const;
  std::string host_ns(std::size_t host) const { return tag_ + "-h" + std::to_string(host); }
  std::string switch_ns() const { return tag_ + "-sw"; }
  std::string observer_ns() const { return tag_ + "-obs"; }
  std::string cable(std::size_t host) const { return tag_ + "h" + std::to_string(host); }

  std::string tag_;     // unique per lab: "gtc<pid>"
  std::string prefix_;  // the hosts' /24, without its last byte: "10.a.b"
  std::size_t hosts_ = 0;
  std::string ip_;      // the `ip` program
  std::vector<std::string> namespaces_;  // made so far, deleted in the destructor
  std::vector<bool> side_b_;
};

}  // namespace gridtrain::app
