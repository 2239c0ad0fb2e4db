// The data plane over real loopback TCP: two Services, as two processes have them, each on its own thread.
#include <doctest/doctest.h>
#include <spdlog/spdlog.h>

#include <asio.hpp>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "allreduce/elastic_update.hpp"
#include "dataplane/service.hpp"
#include "tests/dataplane/keyed_mac.hpp"
#include "tests/tls_certificates.hpp"

using namespace gridtrain;
using namespace gridtrain::dataplane;
using gridtrain::testing::keyed;
using namespace std::chrono_literals;

namespace {

// One node: a model of `floats` floats holding base + index, its endpoint, and the rounds it finished.
struct Node {
  Node(Service& service, std::uint64_t id, std::size_t floats, float base, std::uint8_t token = 1) : model(floats) {
    for (std::size_t j = 0; j < floats; ++j) model[j] = base + static_cast<float>(j % 1000);
    EndpointSetup setup;
    setup.node_id = id;
    setup.model.floats = floats;
    setup.model.fetch = [this](std::size_t offset, std::span<float> into) {
      std::lock_guard<std::mutex> hold(lock);
      std::copy_n(model.begin() + static_cast<std::ptrdiff_t>(offset), into.size(), into.begin());
    };
    setup.model.update = [this](const allreduce::Round& round, std::size_t begin, std::size_t end, float alpha) {
      std::lock_guard<std::mutex> hold(lock);
      allreduce::elastic_update(std::span<float>(model).subspan(begin, end - begin), begin, round, alpha);
    };
    setup.model.fold = [this](std::size_t offset, std::size_t length, const allreduce::FoldTarget& target,
                              float alpha) {
      std::lock_guard<std::mutex> hold(lock);
      allreduce::fold_chunk(std::span<float>(model).subspan(offset, length), target, 0, alpha);
    };
    setup.model.memory = model;  // as a node's store gives it: sends over TCP go out straight from it
    setup.mac = keyed(token);
    setup.on_event = [this](const RoundEvent& e) {
      std::lock_guard<std::mutex> hold(lock);
      if (e.kind == RoundEvent::Kind::done) ++done;
      changed.notify_all();
    };
    endpoint = service.add_endpoint(std::move(setup));
  }
  bool wait_done(std::uint64_t rounds, std::chrono::seconds within = 20s) {
    std::unique_lock<std::mutex> hold(lock);
    return changed.wait_for(hold, within, [&] { return done >= rounds; });
  }
  std::vector<float> read() {
    std::lock_guard<std::mutex> hold(lock);
    return model;
  }

  std::mutex lock;
  std::condition_variable changed;
  std::vector<float> model;
  std::uint64_t done = 0;
  std::unique_ptr<Endpoint> endpoint;
};

allreduce::RoundConfig exact() {
  allreduce::RoundConfig c;
  c.quorum = allreduce::QuorumMode::fraction;
  c.reduce_threshold = c.complete_threshold = c.advance_threshold = 1;
  c.elastic_rate = 1;
  c.max_chunk_floats = 65536;
  return c;
}

// spdlog's registry, made on this thread before any service's thread logs: made first by two services' threads at
// once, ThreadSanitizer reports a race it cannot see is guarded (inside libspdlog, which it does not instrument).
void make_log_registry() { spdlog::default_logger_raw(); }

std::shared_ptr<Service> service(std::shared_ptr<const TlsContext> tls = nullptr) {
  make_log_registry();
  auto s = Service::start({.tls = std::move(tls)});
  REQUIRE(s.ok());
  return s.value();
}

// Starts a line of `nodes` (in that order) on every one of them.
void start_line(const std::vector<Node*>& nodes, const std::vector<std::string>& addresses, std::uint64_t version,
                allreduce::RoundConfig config = exact()) {
  LineSpec spec;
  spec.epoch = 1;
  spec.layout_version = version;
  spec.line = 7;
  for (Node* n : nodes) spec.peers.push_back(n->endpoint->node_id());
  spec.round = config;
  spec.rounds_in_flight = 2;
  for (std::uint32_t i = 0; i < nodes.size(); ++i) {
    spec.self_index = i;
    nodes[i]->endpoint->start_line(spec, addresses);
  }
}

allreduce::RoundKey key(std::uint64_t version, std::uint64_t round) {
  return {.epoch = 1, .layout_version = version, .dim = 0, .line = 7, .round = round};
}

}  // namespace

TEST_CASE("two processes' data planes run rounds over TCP to the exact mean, round after round") {
  auto a = service(), b = service();
  Node n1(*a, 1, 300000, 0.0f), n2(*b, 2, 300000, 10.0f);
  start_line({&n1, &n2}, {a->address(), b->address()}, 3);
  for (std::uint64_t r = 1; r <= 20; ++r) {
    n1.endpoint->start_round(key(3, r));
    n2.endpoint->start_round(key(3, r));
    REQUIRE(n1.wait_done(r));
    REQUIRE(n2.wait_done(r));
  }
  const auto m1 = n1.read(), m2 = n2.read();
  CHECK(m1 == m2);
  for (std::size_t j = 0; j < m1.size(); j += 997) CHECK(m1[j] == 5.0f + static_cast<float>(j % 1000));
  const DimensionCounters& c = n1.endpoint->counters(0);
  CHECK(c.rounds_done == 20);
  // Each round: half the model out as our values, half out as means; and as much in.
  CHECK(c.bytes_sent == 20 * 300000 * sizeof(float));
  CHECK(c.bytes_received == 20 * 300000 * sizeof(float));
  CHECK(c.frames_unsent == 0);
  CHECK(c.malformed == 0);
}

namespace {

// This process's TCP sockets connected to `port` on 127.0.0.1: a dialer's ends of its connections to a service.
std::vector<int> sockets_to(std::uint16_t port) {
  std::vector<int> out;
  for (int fd = 0; fd < 4096; ++fd) {
    sockaddr_in peer{};
    socklen_t length = sizeof(peer);
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) == 0 && peer.sin_family == AF_INET &&
        ntohs(peer.sin_port) == port)
      out.push_back(fd);
  }
  return out;
}

std::uint16_t port_of(const std::string& address) {
  return static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
}

}  // namespace

TEST_CASE("several connections to a peer: its dialer opens them, the chunks spread over them, a lost one comes back") {
  // Node 1 dials node 2 (the lower id dials) with 4 connections; node 2's own setting (1) does not matter: it uses
  // as many as its dialer opened.
  make_log_registry();
  auto a = Service::start({.streams = 4}).value();
  auto b = service();
  Node n1(*a, 1, 300000, 0.0f), n2(*b, 2, 300000, 10.0f);
  start_line({&n1, &n2}, {a->address(), b->address()}, 3);
  std::uint64_t r = 0;
  auto rounds = [&](std::uint64_t n) {
    for (std::uint64_t last = r + n; r < last;) {
      ++r;
      n1.endpoint->start_round(key(3, r));
      n2.endpoint->start_round(key(3, r));
      REQUIRE(n1.wait_done(r));
      REQUIRE(n2.wait_done(r));
    }
  };
  rounds(10);
  CHECK(n1.endpoint->connections() == 4);
  CHECK(n2.endpoint->connections() == 4);
  std::vector<int> dialed = sockets_to(port_of(b->address()));
  REQUIRE(dialed.size() == 4);
  // One of them breaks (as a peer's reset would break it): node 1 redials it, and rounds go on over all four.
  ::shutdown(dialed[1], SHUT_RDWR);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (sockets_to(port_of(b->address())).size() == 4 && n1.endpoint->connections() == 4 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  while (n1.endpoint->connections() < 4 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  CHECK(n1.endpoint->connections() == 4);
  rounds(10);
  const auto m1 = n1.read(), m2 = n2.read();
  CHECK(m1 == m2);
  for (std::size_t j = 0; j < m1.size(); j += 997) CHECK(m1[j] == 5.0f + static_cast<float>(j % 1000));
  const DimensionCounters& c = n1.endpoint->counters(0);
  CHECK(c.malformed == 0);
  CHECK(c.rounds_done == 20);
}

TEST_CASE("a hello for a connection beyond the streams it names is refused as another protocol") {
  auto b = service();
  Node n2(*b, 2, 1000, 10.0f);
  for (const auto& [stream, streams] : {std::pair<int, int>{4, 4}, {0, 0}, {0, kMaxStreams + 1}}) {
    CAPTURE(stream);
    CAPTURE(streams);
    asio::io_context io;
    asio::ip::tcp::socket s(io);
    s.connect({asio::ip::make_address("127.0.0.1"), port_of(b->address())});
    std::array<std::byte, kHelloBytes> hello{};
    encode(Hello{kDataProtocol, 1, 2, static_cast<std::uint16_t>(stream), static_cast<std::uint16_t>(streams),
                 make_nonce()},
           std::span<std::byte, kHelloBytes>(hello));
    asio::write(s, asio::buffer(hello));
    std::array<std::byte, kChallengeBytes> answer{};
    asio::read(s, asio::buffer(answer));
    auto challenge = decode_challenge(answer);
    REQUIRE(challenge.ok());
    CHECK(challenge.value().refusal == Refusal::protocol);
  }
  CHECK(n2.endpoint->connections() == 0);
}

namespace {

// A port of 127.0.0.1 nothing listens on, for now (bound by the system, then closed).
std::uint16_t closed_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return a.local_endpoint().port();
}

// The line of nodes 1 and 2 (version 3, as key() has it), seen from node 1; node 2 sets self_index = 1.
LineSpec line_of_1_and_2() {
  LineSpec spec;
  spec.epoch = 1;
  spec.layout_version = 3;
  spec.line = 7;
  spec.peers = {1, 2};
  spec.round = exact();
  spec.rounds_in_flight = 2;
  spec.self_index = 0;
  return spec;
}

}  // namespace

TEST_CASE("a line peer not reached is warned about and counted until it is reached; then rounds run") {
  // Node 1 dials node 2 (the lower id dials) at an address where nothing listens yet: a wrong data address or a
  // closed port, as a user would have it. It counts the peer as unreachable once the warning time has passed, and
  // no longer once the peer is there.
  const std::uint16_t port = closed_port();
  auto a = Service::start({.unreachable_warning = 300ms});
  REQUIRE(a.ok());
  Node n1(*a.value(), 1, 1000, 0.0f);
  const std::vector<std::string> addresses{a.value()->address(), "127.0.0.1:" + std::to_string(port)};
  LineSpec spec = line_of_1_and_2();
  n1.endpoint->start_line(spec, addresses);
  CHECK(n1.endpoint->unreachable_peers() == 0);  // not before the warning time
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (n1.endpoint->unreachable_peers() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  CHECK(n1.endpoint->unreachable_peers() == 1);

  auto b = Service::start({.port = port});
  REQUIRE(b.ok());
  Node n2(*b.value(), 2, 1000, 10.0f);
  spec.self_index = 1;
  n2.endpoint->start_line(spec, addresses);
  n1.endpoint->start_round(key(3, 1));
  n2.endpoint->start_round(key(3, 1));
  CHECK(n1.wait_done(1));  // within the redial backoff (2 s at most)
  CHECK(n2.wait_done(1));
  CHECK(n1.endpoint->unreachable_peers() == 0);
  CHECK(n1.read() == n2.read());
}

TEST_CASE("a dial that gets no answer, as through a firewall that drops it, gives up and counts the peer") {
  // A listener whose accept queue is full drops the SYNs of further connections: a connect to it waits, as to a
  // port behind a firewall that drops packets (the kernel retries its SYN for about two minutes).
  asio::io_context io;
  asio::ip::tcp::acceptor full(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  full.listen(0);
  std::vector<asio::ip::tcp::socket> queued;
  for (int i = 0; i < 3; ++i) {
    queued.emplace_back(io);
    queued.back().async_connect(full.local_endpoint(), [](std::error_code) {});
  }
  io.run_for(300ms);
  auto a = Service::start({.unreachable_warning = 300ms});
  REQUIRE(a.ok());
  Node n1(*a.value(), 1, 1000, 0.0f);
  LineSpec spec = line_of_1_and_2();
  n1.endpoint->start_line(spec, {a.value()->address(), "127.0.0.1:" + std::to_string(full.local_endpoint().port())});
  // The dial gives up after the handshake timeout (5 s), so the peer is counted well before the kernel would.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (n1.endpoint->unreachable_peers() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  CHECK(n1.endpoint->unreachable_peers() == 1);
}

TEST_CASE("a service's CPU time is its thread's, and stays counted after it stops") {
  auto s = service();
  const auto before = s->cpu_time();
  // Work on the service's thread until that thread's own clock says 30 ms of CPU went by.
  std::promise<std::chrono::nanoseconds> spun;
  s->post([&spun] {
    timespec start{}, now{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
    do clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < 30000000L);
    spun.set_value(std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec));
  });
  const auto at_end_of_spin = spun.get_future().get();
  const auto during = s->cpu_time();
  CHECK(during - before >= 30ms);
  CHECK(during >= at_end_of_spin);
  s->stop();
  const auto after = s->cpu_time();
  CHECK(after >= during);
  CHECK(s->cpu_time() == after);  // the thread has ended: its total no longer moves

  auto polled = Service::start({.listen = false, .own_thread = false});
  REQUIRE(polled.ok());
  CHECK(polled.value()->cpu_time() == 0ns);  // no thread of its own: its owner's thread does the work
}

TEST_CASE("a peer without the cluster token is refused, and no round runs with it") {
  auto a = service(), b = service();
  Node n1(*a, 1, 1000, 0.0f, 1), n2(*b, 2, 1000, 10.0f, 2);
  start_line({&n1, &n2}, {a->address(), b->address()}, 3);
  n1.endpoint->start_round(key(3, 1));
  n2.endpoint->start_round(key(3, 1));
  CHECK_FALSE(n1.wait_done(1, 2s));
  CHECK(n1.endpoint->refusals().total() + n2.endpoint->refusals().total() > 0);
  CHECK(n1.read()[0] == 0.0f);
  CHECK(n2.read()[0] == 10.0f);
}

TEST_CASE("random bytes on the data port, and a frame too long for any line, leave the service running") {
  auto a = service(), b = service();
  Node n1(*a, 1, 1000, 0.0f), n2(*b, 2, 1000, 10.0f);
  start_line({&n1, &n2}, {a->address(), b->address()}, 3);
  {
    // A stranger: garbage, then a hello for a node that is not there.
    asio::io_context io;
    asio::ip::tcp::socket s(io);
    const auto colon = b->address().rfind(':');
    s.connect({asio::ip::make_address("127.0.0.1"),
               static_cast<std::uint16_t>(std::stoi(b->address().substr(colon + 1)))});
    std::vector<std::byte> garbage(4096);
    for (std::size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<std::byte>(i * 7919 >> 3);
    std::error_code ignored;
    asio::write(s, asio::buffer(garbage), ignored);
    s.close();
  }
  n1.endpoint->start_round(key(3, 1));
  n2.endpoint->start_round(key(3, 1));
  REQUIRE(n1.wait_done(1));
  REQUIRE(n2.wait_done(1));
  CHECK(n2.read()[0] == 5.0f);
}

namespace {

// A TCP connection to 127.0.0.1:port from the local address `from` (any of 127.0.0.0/8 is this machine), as a
// stranger on another machine would make it.
asio::ip::tcp::socket connect_from(asio::io_context& io, const char* from, std::uint16_t port) {
  asio::ip::tcp::socket s(io);
  s.open(asio::ip::tcp::v4());
  s.bind({asio::ip::make_address(from), 0});
  s.connect({asio::ip::make_address("127.0.0.1"), port});
  return s;
}

// The refusal in the challenge a connection got, or nullopt if it got none.
std::optional<Refusal> answer_of(asio::ip::tcp::socket& s) {
  std::array<std::byte, kChallengeBytes> answer{};
  std::error_code e;
  asio::read(s, asio::buffer(answer), e);
  if (e) return std::nullopt;
  auto challenge = decode_challenge(answer);
  if (!challenge) return std::nullopt;
  return challenge.value().refusal;
}

}  // namespace

TEST_CASE("idle connections from one address hold only its share of the handshakes; the rest get a busy answer") {
  auto a = service(), b = service();
  Node n1(*a, 1, 1000, 0.0f), n2(*b, 2, 1000, 10.0f);
  const std::uint16_t port = port_of(b->address());
  asio::io_context io;
  std::vector<asio::ip::tcp::socket> idle;
  for (std::size_t i = 0; i < Service::kMaxPendingPerAddress; ++i) idle.push_back(connect_from(io, "127.0.0.9", port));
  // One more from that address is answered busy at once, and closed.
  auto extra = connect_from(io, "127.0.0.9", port);
  CHECK(answer_of(extra) == Refusal::busy);
  CHECK(b->handshakes_busy_address() == 1);
  // The line of nodes 1 and 2 (node 1 dials from 127.0.0.1) still forms and runs.
  start_line({&n1, &n2}, {a->address(), b->address()}, 3);
  n1.endpoint->start_round(key(3, 1));
  n2.endpoint->start_round(key(3, 1));
  REQUIRE(n1.wait_done(1));
  REQUIRE(n2.wait_done(1));
  CHECK(n2.read()[0] == 5.0f);
}

TEST_CASE("in all, at most kMaxPendingHandshakes wait: addresses that fill them leave the next one a busy answer") {
  auto b = service();
  const std::uint16_t port = port_of(b->address());
  asio::io_context io;
  std::vector<asio::ip::tcp::socket> idle;
  for (const char* from : {"127.0.0.10", "127.0.0.11", "127.0.0.12", "127.0.0.13"})
    for (std::size_t i = 0; i < Service::kMaxPendingPerAddress; ++i) idle.push_back(connect_from(io, from, port));
  REQUIRE(idle.size() == Service::kMaxPendingHandshakes);
  auto over = connect_from(io, "127.0.0.14", port);
  CHECK(answer_of(over) == Refusal::busy);
  CHECK(b->handshakes_overflowed() == 1);
  CHECK(b->handshakes_busy_address() == 0);
}

TEST_CASE("a line of nodes in one process runs its rounds through memory") {
  auto s = service();
  Node n1(*s, 1, 5000, 0.0f), n2(*s, 2, 5000, 10.0f), n3(*s, 3, 5000, 20.0f);
  start_line({&n1, &n2, &n3}, {"", "", ""}, 4);
  for (std::uint64_t r = 1; r <= 3; ++r) {
    for (Node* n : {&n1, &n2, &n3}) n->endpoint->start_round(key(4, r));
    for (Node* n : {&n1, &n2, &n3}) REQUIRE(n->wait_done(r));
  }
  CHECK(n1.read() == n3.read());
  CHECK(n2.read()[1] == 11.0f);
}

TEST_CASE("compressed chunks over TCP and through memory: the same models on every node, a quarter of the bytes") {
  for (const auto wire : {allreduce::WireFormat::bf16, allreduce::WireFormat::int8}) {
    CAPTURE(allreduce::wire_format_name(wire));
    allreduce::RoundConfig config = exact();
    config.wire = wire;
    // Two processes over TCP (a chunk's payload comes in many reads), and three nodes of one process.
    auto a = service(), b = service();
    Node n1(*a, 1, 300000, 0.0f), n2(*b, 2, 300000, 10.0f);
    start_line({&n1, &n2}, {a->address(), b->address()}, 3, config);
    auto s = service();
    Node m1(*s, 11, 5000, 0.0f), m2(*s, 12, 5000, 10.0f), m3(*s, 13, 5000, 20.0f);
    start_line({&m1, &m2, &m3}, {"", "", ""}, 4, config);
    for (std::uint64_t r = 1; r <= 3; ++r) {
      for (Node* n : {&n1, &n2}) n->endpoint->start_round(key(3, r));
      for (Node* n : {&m1, &m2, &m3}) n->endpoint->start_round(key(4, r));
      for (Node* n : {&n1, &n2, &m1, &m2, &m3}) REQUIRE(n->wait_done(r));
    }
    // α = 1: every node applied the same decoded mean, so the models are the same floats, near the exact mean.
    const auto tcp = n1.read(), memory = m1.read();
    CHECK(tcp == n2.read());
    CHECK(memory == m2.read());
    CHECK(memory == m3.read());
    // Values up to about 1,030: an int8 step is at most 1030/127, a bf16 one 1030/128. A contribution (with what
    // the last one's encoding kept back) and the mean are each off by about a step at most.
    const float bound = 2 * 1030.0f / (wire == allreduce::WireFormat::int8 ? 127 : 128);
    for (std::size_t j = 0; j < tcp.size(); j += 997)
      CHECK(std::abs(tcp[j] - (5.0f + static_cast<float>(j % 1000))) <= bound);
    for (std::size_t j = 0; j < memory.size(); j += 97)
      CHECK(std::abs(memory[j] - (10.0f + static_cast<float>(j % 1000))) <= bound);
    const DimensionCounters& c = n1.endpoint->counters(0);
    const double fp32 = 3.0 * 300000 * sizeof(float);  // 3 rounds' bytes out at fp32 (see the test above)
    CHECK(c.bytes_sent <= (wire == allreduce::WireFormat::int8 ? 0.27 : 0.5) * fp32);
    CHECK(c.bytes_received == c.bytes_sent);
    CHECK(c.malformed == 0);
    CHECK(n1.endpoint->refusals().total() + n2.endpoint->refusals().total() == 0);
  }
}

TEST_CASE("TlsContext::load says which file is wrong and why") {
  testing::TestCertificates ours({"a", "b"}), theirs({"x"});
  auto refused = [](const TlsFiles& files) {
    auto loaded = TlsContext::load(files);
    REQUIRE_FALSE(loaded.ok());
    return loaded.error();
  };
  TlsFiles files = ours.files("a");
  files.certificate = ours.path("missing.pem");
  CHECK(refused(files).key == "cluster.tls_certificate");
  CHECK(refused(files).message == "cannot read the certificate file");

  files = ours.files("a");
  files.certificate = files.key;  // a key where the certificate belongs
  CHECK(refused(files).key == "cluster.tls_certificate");
  CHECK(refused(files).message.find("not a PEM certificate") == 0);

  files = ours.files("a");
  files.key = ours.path("b.key");  // another node's key
  CHECK(refused(files).key == "cluster.tls_key");
  CHECK(refused(files).message.find("the key does not belong to the certificate") == 0);

  files = ours.files("a");
  files.ca = theirs.path("ca.pem");  // a CA that did not sign our certificate
  const Error e = refused(files);
  CHECK(e.key == "cluster.tls_certificate");
  CHECK(e.source == files.certificate);
  CHECK(e.message.find("does not pass the check against cluster.tls_ca") != std::string::npos);

  CHECK(ours.context("a")->subject() == "CN=a");
}

TEST_CASE("a process that loaded a TLS context takes a write to a closed connection as EPIPE, not SIGPIPE") {
  // OpenSSL writes with write(2); by default the write after the peer closed raises SIGPIPE and ends the process:
  // a node whose TLS peer left or was killed would die with it.
  testing::TestCertificates certs({"a"});
  REQUIRE(certs.context("a") != nullptr);
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
  ::close(pair[1]);
  const char byte = 1;
  errno = 0;
  CHECK(::write(pair[0], &byte, 1) == -1);  // the test process is still here
  CHECK(errno == EPIPE);
  ::close(pair[0]);
}

TEST_CASE("with TLS on both sides, two processes' data planes run rounds to the exact mean") {
  testing::TestCertificates certs({"a", "b"});
  auto a = service(certs.context("a")), b = service(certs.context("b"));
  Node n1(*a, 1, 300000, 0.0f), n2(*b, 2, 300000, 10.0f);
  start_line({&n1, &n2}, {a->address(), b->address()}, 3);
  for (std::uint64_t r = 1; r <= 5; ++r) {
    n1.endpoint->start_round(key(3, r));
    n2.endpoint->start_round(key(3, r));
    REQUIRE(n1.wait_done(r));
    REQUIRE(n2.wait_done(r));
  }
  const auto m1 = n1.read(), m2 = n2.read();
  CHECK(m1 == m2);
  for (std::size_t j = 0; j < m1.size(); j += 997) CHECK(m1[j] == 5.0f + static_cast<float>(j % 1000));
  CHECK(n1.endpoint->counters(0).bytes_received == 5 * 300000 * sizeof(float));
  CHECK(n1.endpoint->refusals().total() + n2.endpoint->refusals().total() == 0);
}

TEST_CASE("a peer whose certificate another CA signed is refused, and no round runs with it") {
  testing::TestCertificates ours({"a"}), theirs({"x"});
  auto a = service(ours.context("a")), b = service(theirs.context("x"));
  Node n1(*a, 1, 1000, 0.0f), n2(*b, 2, 1000, 10.0f);
  start_line({&n1, &n2}, {a->address(), b->address()}, 3);
  n1.endpoint->start_round(key(3, 1));
  n2.endpoint->start_round(key(3, 1));
  CHECK_FALSE(n1.wait_done(1, 2s));
  CHECK(n1.endpoint->refusals().total() > 0);
  CHECK(n2.endpoint->refusals().total() > 0);
  CHECK(n1.read()[0] == 0.0f);
  CHECK(n2.read()[0] == 10.0f);
}

TEST_CASE("a peer without TLS is refused by a peer with TLS, both ways round") {
  testing::TestCertificates certs({"a"});
  for (const bool dialer_has_tls : {true, false}) {
    CAPTURE(dialer_has_tls);
    // Node 1 dials node 2 (the lower id dials).
    auto a = service(dialer_has_tls ? certs.context("a") : nullptr);
    auto b = service(dialer_has_tls ? nullptr : certs.context("a"));
    Node n1(*a, 1, 1000, 0.0f), n2(*b, 2, 1000, 10.0f);
    start_line({&n1, &n2}, {a->address(), b->address()}, 3);
    n1.endpoint->start_round(key(3, 1));
    n2.endpoint->start_round(key(3, 1));
    CHECK_FALSE(n1.wait_done(1, 1s));
    CHECK(n1.endpoint->refusals().total() > 0);
    CHECK(n2.read()[0] == 10.0f);
  }
}
