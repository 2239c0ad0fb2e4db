// The node's ports themselves: each input goes over a real TCP connection to a live node of this process (two
// nodes in one line, in two actor systems, with a cluster token). The first byte picks how:
//   0: raw bytes to the gate, in front of CAF;
//   1: raw bytes to the data plane's port;
//   2: a data-plane connection that passed the handshake with the cluster token (a hostile insider), then the bytes
//      as frames, to a node whose line is running rounds.
// Then the connection closes. Every 128 inputs both nodes must still be in their cluster, answering: a crash or a
// hang anywhere in the gate, the handshakes or the data plane's readers ends the run. What follows the gate's
// handshake goes to CAF's own parser, which trusts holders of the token (docs/design.md, "The gate"), so it is not
// sent there.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "actors/node_handle.hpp"
#include "actors/system_config.hpp"
#include "actors/token_proof.hpp"
#include "config/config.hpp"
#include "dataplane/handshake.hpp"
#include "dataplane/service.hpp"
#include "fuzz_target.hpp"

namespace {

using namespace gridtrain;

constexpr const char* kToken = "fuzz-ports-token";
constexpr std::uint64_t kIntruder = 77;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "fuzz_ports: %s\n", why.c_str());
  std::abort();
}

// The two nodes, started at the first input. Never destroyed: CAF 0.17's actor system, destroyed among the statics
// at exit, outlives state of its own library and crashes. The nodes are stopped at exit instead.
struct Cluster {
  Cluster() {
    char pattern[] = "/tmp/gridtrain-fuzz-ports-XXXXXX";
    if (!::mkdtemp(pattern)) die("cannot make a temporary directory");
    spdlog::set_level(spdlog::level::warn);  // a connection closed per input: the info lines would be millions
    dir = pattern;
    std::ofstream(dir / "token") << kToken << "\n";
    auto loaded = config::load_string("cluster: {listen: 127.0.0.1:0, token_file: " + (dir / "token").string() +
                                          "}\ngrid: {dims: 1}\nlearner: {kind: probe, probe_floats: 4096}\n"
                                          "allreduce: {max_chunk_floats: 1024}\n",
                                      "fuzz_ports");
    if (!loaded) die(loaded.error().to_string());
    config = std::move(loaded).value();
    system_a = new caf::actor_system(*new actors::SystemConfig(config));
    system_b = new caf::actor_system(*new actors::SystemConfig(config));
    auto data_plane = actors::start_data_plane(config, true);
    if (!data_plane) die(data_plane.error().to_string());
    const std::string address = data_plane.value()->address();
    data_port = static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
    actors::NodeOptions options;
    options.config = config;
    options.node_id = 1;
    options.data_plane = data_plane.value();
    first = start(*system_a, options);
    gate_port = first->port();
    options.node_id = 2;
    auto second_plane = actors::start_data_plane(config, true);
    if (!second_plane) die(second_plane.error().to_string());
    options.data_plane = second_plane.value();
    planes = {data_plane.value(), second_plane.value()};
    options.seeds = {config::HostPort{"127.0.0.1", gate_port}};
    second = start(*system_b, options);
    for (int i = 0; i < 100 && first->stats().dims[0].peers != 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (first->stats().dims[0].peers != 2) die("the two nodes formed no line");
    std::atexit([] { instance().stop(); });
  }

  static Cluster& instance() {
    static Cluster* cluster = new Cluster;
    return *cluster;
  }

  static std::unique_ptr<actors::NodeHandle> start(caf::actor_system& system, actors::NodeOptions options) {
    auto node = actors::start_node(system, std::move(options));
    if (!node) die(node.error().to_string());
    if (node.value().wait_joined().result != actors::JoinResult::welcomed) die("a node was not welcomed");
    return std::make_unique<actors::NodeHandle>(node.value());
  }

  // Both nodes are members still, and node 1's GridMaster answers with both.
  void check_alive() const {
    const auto view = first->grid_view(std::chrono::seconds(10));
    if (!view || view.value().nodes.size() != 2) die("the cluster no longer answers with its two nodes");
  }

  void stop() {
    second->kill();
    first->kill();
    second->wait();
    first->wait();
    // The data planes' threads end here, not whenever CAF frees the nodes' state: a thread that ends after
    // OpenSSL's exit handler leaves its per-thread error state behind (LeakSanitizer saw it in about 1 run in 4
    // with two runs at once).
    for (const auto& plane : planes) plane->stop();
    std::filesystem::remove_all(dir);
  }

  std::filesystem::path dir;
  config::Config config;
  caf::actor_system* system_a = nullptr;
  caf::actor_system* system_b = nullptr;
  std::unique_ptr<actors::NodeHandle> first, second;
  std::vector<std::shared_ptr<dataplane::Service>> planes;  // the nodes' data planes
  std::uint16_t gate_port = 0, data_port = 0;
};

// A TCP connection to 127.0.0.1:port; closed with the object. Reads give up after a second.
struct Connection {
  explicit Connection(std::uint16_t port) : fd(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_port = htons(port);
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0) die("cannot connect to the node");
    timeval limit{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  }
  ~Connection() { ::close(fd); }
  // False when the node closed the connection first (it refused what came before).
  bool send(std::span<const std::byte> bytes) const {
    return bytes.empty() || ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }
  template <std::size_t N>
  bool receive(std::array<std::byte, N>& out) const {
    std::size_t done = 0;
    while (done < N) {
      const ssize_t got = ::recv(fd, out.data() + done, N - done, 0);
      if (got <= 0) return false;
      done += static_cast<std::size_t>(got);
    }
    return true;
  }
  int fd;
};

// The dialer's half of the data plane's handshake, as node kIntruder holding the token, to node 1.
bool handshake(const Connection& c) {
  using namespace dataplane;
  const MacFunction mac = [](std::span<const std::byte> m) { return actors::token_mac(kToken, m); };
  const Hello hello{kDataProtocol, kIntruder, 1, 0, 1, make_nonce()};
  std::array<std::byte, kHelloBytes> hello_bytes{};
  encode(hello, hello_bytes);
  std::array<std::byte, kChallengeBytes> challenge_bytes{};
  if (!c.send(hello_bytes) || !c.receive(challenge_bytes)) return false;
  const auto challenge = decode_challenge(challenge_bytes);
  if (!challenge || challenge.value().refusal != Refusal::none) die("the node refused a good hello");
  std::array<std::byte, kProofBytes> proof{};
  encode(Proof{dialer_mac(mac, challenge.value().nonce, kIntruder, 1)}, proof);
  std::array<std::byte, kVerdictBytes> verdict_bytes{};
  if (!c.send(proof) || !c.receive(verdict_bytes)) return false;
  const auto verdict = decode_verdict(verdict_bytes);
  if (!verdict || verdict.value().refusal != Refusal::none) die("the node refused a good proof");
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static std::uint64_t inputs = 0;
  Cluster& cluster = Cluster::instance();
  if (size == 0) return 0;
  const auto rest = fuzz::bytes(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0: Connection(cluster.gate_port).send(rest); break;
    case 1: Connection(cluster.data_port).send(rest); break;
    default: {
      Connection c(cluster.data_port);
      if (handshake(c)) c.send(rest);
    }
  }
  if (++inputs % 128 == 0) cluster.check_alive();
  return 0;
}
