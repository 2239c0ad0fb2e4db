#include "app/net_lab.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>

#include "app/child_process.hpp"

namespace gridtrain::app {

namespace {

constexpr auto kIpTimeout = std::chrono::seconds(10);

Error lab_error(std::string message) { return Error{.source = "chaos --partitions", .message = std::move(message)}; }

}  // namespace

NetLab::NetLab(std::string tag, std::string prefix, std::size_t hosts, std::string ip)
    : tag_(std::move(tag)), prefix_(std::move(prefix)), hosts_(hosts), ip_(std::move(ip)), side_b_(hosts, false) {}

Result<std::unique_ptr<NetLab>> NetLab::create(std::size_t hosts) {
  if (::geteuid() != 0) return lab_error("it makes network namespaces: run it as root");
  std::string ip;
  for (const char* candidate : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (::access(candidate, X_OK) == 0) {
      ip = candidate;
      break;
    }
  if (ip.empty()) return lab_error("no `ip` program (Debian: iproute2)");
  // A tag and a /24 of this process's own, so that two labs (or another test's namespaces) do not meet.
  const auto pid = static_cast<unsigned>(::getpid());
  std::unique_ptr<NetLab> lab(new NetLab("gtc" + std::to_string(pid),
                                         "10." + std::to_string(230 + pid % 20) + "." + std::to_string(pid / 20 % 250),
                                         hosts, ip));
  const std::string sw = lab->switch_ns(), obs = lab->observer_ns();
  auto made = [&](const std::string& ns) -> Status {
    if (Status added = lab->ip({"netns", "add", ns}); !added.ok()) return added;
    lab->namespaces_.push_back(ns);
    return lab->ip({"-n", ns, "link", "set", "lo", "up"});
  };
  std::vector<std::vector<std::string>> steps;
  if (Status s = made(sw); !s.ok()) return s.error();
  for (const char* bridge : {"br0", "br1"}) {
    steps.push_back({"-n", sw, "link", "add", bridge, "type", "bridge"});
    steps.push_back({"-n", sw, "link", "set", bridge, "up"});
  }
  // Made in the switch's namespace with the far end in the other's: no interface is ever made in this machine's.
  if (Status s = made(obs); !s.ok()) return s.error();
  steps.push_back({"-n", sw, "link", "add", "obsA", "type", "veth", "peer", "name", "legA", "netns", obs});
  steps.push_back({"-n", sw, "link", "add", "obsB", "type", "veth", "peer", "name", "legB", "netns", obs});
  steps.push_back({"-n", sw, "link", "set", "obsA", "master", "br0", "up"});
  steps.push_back({"-n", sw, "link", "set", "obsB", "master", "br1", "up"});
  steps.push_back({"-n", obs, "addr", "add", lab->prefix_ + ".250/24", "dev", "legA"});
  steps.push_back({"-n", obs, "addr", "add", lab->prefix_ + ".251/32", "dev", "legB"});
  steps.push_back({"-n", obs, "link", "set", "dev", "legA", "up"});
  steps.push_back({"-n", obs, "link", "set", "dev", "legB", "up"});
  for (const auto& step : steps)
    if (Status s = lab->ip(step); !s.ok()) return s.error();
  for (std::size_t h = 0; h < hosts; ++h) {
    const std::string ns = lab->host_ns(h), cable = lab->cable(h);
    if (Status s = made(ns); !s.ok()) return s.error();
    for (const auto& step : std::vector<std::vector<std::string>>{
             {"-n", sw, "link", "add", cable, "type", "veth", "peer", "name", "eth0", "netns", ns},
             {"-n", sw, "link", "set", cable, "master", "br0", "up"},
             {"-n", ns, "addr", "add", lab->address(h) + "/24", "dev", "eth0"},
             {"-n", ns, "link", "set", "eth0", "up"}})
      if (Status s = lab->ip(step); !s.ok()) return s.error();
  }
  return lab;
}

NetLab::~NetLab() {
  // Whatever still runs in a host's namespace (the chaos command stops its nodes first): killed, so that the
  // namespace can go. Not in the observer's: this process is there.
  for (std::size_t h = 0; h < hosts_; ++h) {
    const CommandResult pids = run_command(ip_, {"netns", "pids", host_ns(h)}, kIpTimeout);
    std::istringstream in(pids.output);
    for (long pid = 0; in >> pid;)
      if (pid > 1 && pid != ::getpid()) ::kill(static_cast<pid_t>(pid), SIGKILL);
  }
  for (const auto& ns : namespaces_) run_command(ip_, {"netns", "del", ns}, kIpTimeout);
}

std::string NetLab::address(std::size_t host) const { return prefix_ + "." + std::to_string(host + 1); }

std::vector<std::string> NetLab::exec_args(std::size_t host, const std::vector<std::string>& argv) const {
  std::vector<std::string> args{"netns", "exec", host_ns(host)};
  args.insert(args.end(), argv.begin(), argv.end());
  return args;
}

Status NetLab::enter_observer() const {
  const std::string path = "/var/run/netns/" + observer_ns();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return lab_error("cannot open " + path + ": " + std::strerror(errno));
  const int entered = ::setns(fd, CLONE_NEWNET);
  const int why = errno;
  ::close(fd);
  if (entered != 0) return lab_error("cannot enter the observer's namespace: " + std::string(std::strerror(why)));
  return {};
}

Status NetLab::cut(const std::vector<std::size_t>& side_b) {
  std::vector<bool> wanted(hosts_, false);
  for (std::size_t h : side_b)
    if (h < hosts_) wanted[h] = true;
  for (std::size_t h = 0; h < hosts_; ++h) {
    if (wanted[h] == side_b_[h]) continue;
    if (Status moved = ip({"-n", switch_ns(), "link", "set", cable(h), "master", wanted[h] ? "br1" : "br0"});
        !moved.ok())
      return moved;
    // The observer reaches a host on side B through its leg there.
    const std::string host = address(h) + "/32";
    Status routed = wanted[h] ? ip({"-n", observer_ns(), "route", "replace", host, "dev", "legB", "src", prefix_ + ".251"})
                              : ip({"-n", observer_ns(), "route", "del", host});
    if (!routed.ok()) return routed;
    // The host's neighbour entry for the observer still names the leg it reached before the move, now on the
    // other bridge: forgotten, the host asks anew and a leg on its own bridge answers. Kept, the observer's
    // requests to the moved host went unanswered after a heal (one dial timed out after 10.2 s), and the chaos
    // reported heals after 12-33 s where the nodes' logs showed the grid whole within 1-5 s.
    if (Status flushed = ip({"-n", host_ns(h), "neigh", "flush", "all"}); !flushed.ok()) return flushed;
    side_b_[h] = wanted[h];
  }
  return {};
}

Status NetLab::ip(const std::vector<std::string>& args) const {
  const CommandResult done = run_command(ip_, args, kIpTimeout);
  if (done.exit_code == 0) return {};
  std::string command = "ip";
  for (const auto& a : args) command += " " + a;
  return lab_error(command + " failed (exit " + std::to_string(done.exit_code) + "): " + done.output);
}

}  // namespace gridtrain::app
