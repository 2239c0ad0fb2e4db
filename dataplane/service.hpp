#pragma once
// Service: the data plane of one process. One thread, one listening port, and the nodes of the process
// (Endpoint) with their lines' rounds and their connections to their line peers.
//
// A round's chunks travel here, not through CAF: over TCP connections between each pair of line peers (a Link each;
// one unless ServiceOptions::streams says more), framed
// as dataplane/frame.hpp says, written straight from the Round's buffers (gather writes) and read straight into
// them; so control messages never queue behind bulk data, and nothing is serialized or copied on the way. A peer
// in the same process is reached through memory instead (a copy into a posted delivery), which is how in-process
// clusters (tests, the scale benchmark) run the same rounds.
//
// Connections: of each pair of nodes the lower id dials the higher one's data address; the handshake
// (dataplane/handshake.hpp) proves the cluster token both ways. A link lives while some line of its node includes
// the peer; a dialer redials a lost link with backoff while it is wanted.
// Pacing: frames wait in their link's queue (headers and pointers only, no copies); a link writes while its socket
// takes bytes, so TCP's flow control is the back pressure, and a slow or stopped peer costs no memory beyond its
// socket buffers: its queue holds references to round buffers that exist anyway, and a round that moves on drops
// its frames not yet begun.
//
//   auto service = Service::start({.host = "10.0.0.5"}).value();
//   auto endpoint = service->add_endpoint({.node_id = id, .model = ..., .mac = ..., .on_event = ...});
//   endpoint->start_line(spec, data_addresses);   // from the control plane's StartLine
//   endpoint->start_round(key);                   // from its StartRound
//
// Endpoint's calls are thread-safe: they post work to the service's thread, which calls on_event.

#include <time.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "dataplane/handshake.hpp"
#include "dataplane/line_runner.hpp"
#include "dataplane/tls.hpp"

namespace gridtrain::dataplane {

// The most grid dimensions one node runs lines in.
inline constexpr std::uint32_t kMaxLineDims = 8;

struct ServiceOptions {
  std::string host = "127.0.0.1";  // where to listen: the node's advertised host
  std::uint16_t port = 0;           // 0: a free one
  bool listen = true;               // false: in-process peers only (deterministic tests)
  bool own_thread = true;           // false: the owner runs it with poll_one() (deterministic tests)
  int socket_buffer_bytes = 0;      // SO_SNDBUF and SO_RCVBUF of every data connection; 0: the kernel's autotuning
  // TCP connections a node opens to each line peer it dials (the lower id dials; the other side uses as many as
  // its dialer opened): one lost segment then holds back one connection's share of a round, not all of it. Each
  // chunk keeps to one connection (chunk mod streams), so that its frames come in order. 1..kMaxStreams.
  std::uint16_t streams = 1;
  // TLS on every data connection after its token handshake (dataplane/tls.hpp); nullptr: plaintext. Peers must
  // agree: a dialer of the other kind is refused as Refusal::tls_mismatch.
  std::shared_ptr<const TlsContext> tls = nullptr;
  // A node that has not reached a line peer it dials for this long says so in a warning (each failed dial is an info
  // line) and counts the peer in Endpoint::unreachable_peers() until it does: a wrong data address, or a data port
  // closed between machines, would otherwise look like a cluster that runs, its rounds never holding that peer's
  // values. Longer than a node's restart or a failover takes.
  std::chrono::milliseconds unreachable_warning{10000};
};

// What an endpoint refused of its peers' connections and frames; each refusal closes the connection, and is
// logged once per pair of nodes.
struct LinkRefusals {
  std::uint64_t handshakes = 0;  // handshakes that failed either way: no cluster token, TLS on one side, another CA
  std::uint64_t bad_frames = 0;  // 64 bytes that are no frame header
  std::uint64_t oversized = 0;   // a frame longer than any chunk of our lines: refused before a byte of it is read
  std::uint64_t truncated = 0;   // the connection ended inside a frame
  std::uint64_t total() const { return handshakes + bad_frames + oversized + truncated; }
};

struct EndpointSetup {
  std::uint64_t node_id = 0;
  ModelAccess model;
  MacFunction mac;                                   // HMAC-SHA-256 under this node's cluster token
  std::function<void(const RoundEvent&)> on_event;  // called on the service's thread
};

class Service;
struct EndpointState;

// One node's data plane. Thread-safe; the work runs on the service's thread.
class Endpoint {
 public:
  Endpoint(std::shared_ptr<Service> service, std::shared_ptr<EndpointState> state);
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;
  ~Endpoint();  // close()

  std::uint64_t node_id() const;
  // The line of dimension spec.dim, with each peer's data address (host:port) in peer-index order.
  void start_line(LineSpec spec, std::vector<std::string> data_addresses);
  // No line in dimension `dim` (the node lost the cluster); with a version, only if the line is older than it.
  void drop_line(std::uint32_t dim, std::optional<std::pair<std::uint64_t, std::uint64_t>> older_than = std::nullopt);
  void start_round(const allreduce::RoundKey& key);
  void deadline(const allreduce::RoundKey& key);
  // What dimension `dim` counted so far. REQUIRES: dim < kMaxLineDims.
  const DimensionCounters& counters(std::uint32_t dim) const;
  // Every dimension's counters, for other threads to read (they are atomics) without asking the node's actors: held
  // by the reader, they outlive the endpoint.
  std::shared_ptr<const std::array<DimensionCounters, kMaxLineDims>> shared_counters() const;
  // The connections and frames refused so far, by kind.
  LinkRefusals refusals() const;
  // The line peers this node dials and has not reached for ServiceOptions::unreachable_warning, now.
  std::uint32_t unreachable_peers() const;
  // The TCP connections it has open to its peers, now (ServiceOptions::streams to each peer it dials).
  std::uint32_t connections() const;
  // The node ends: its lines and links go; no event comes after this returns... once the service has run it.
  void close();

 private:
  std::shared_ptr<Service> service_;
  std::shared_ptr<EndpointState> state_;
};

class Service : public std::enable_shared_from_this<Service> {
 public:
  // Listens (unless options.listen is false) and starts the thread (unless options.own_thread is false). Errors:
  // the address cannot be bound.
  static Result<std::shared_ptr<Service>> start(ServiceOptions options);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // host:port of the listening socket; "" when it does not listen.
  std::string address() const { return address_; }
  // Connections answered "busy" (Refusal::busy) and closed at accept: because kMaxPendingHandshakes were under way,
  // or kMaxPendingPerAddress from the same address (dataplane/admission.hpp). An idle flood from one address holds
  // at most kMaxPendingPerAddress sockets, each for the handshake's timeout; a dialer told "busy" redials.
  std::uint64_t handshakes_overflowed() const { return handshakes_overflowed_; }
  std::uint64_t handshakes_busy_address() const { return handshakes_busy_address_; }
  // Connections whose first bytes were no data-plane hello, or that said nothing within the handshake's time, or
  // that asked for a node or protocol not here: strangers, closed without an answer beyond a refusal code.
  std::uint64_t strangers() const { return strangers_; }
  static constexpr std::size_t kMaxPendingHandshakes = 64;
  static constexpr std::size_t kMaxPendingPerAddress = 16;  // a dialer opens up to kMaxStreams at once
  std::unique_ptr<Endpoint> add_endpoint(EndpointSetup setup);
  // Without a thread of its own: runs at most one ready handler; returns how many ran (0 or 1).
  std::size_t poll_one();
  // Runs `work` on the service's thread (tests; the endpoints post their calls the same way).
  void post(std::function<void()> work);
  // Stops the thread and closes every connection; endpoints do nothing after this.
  void stop();
  // The CPU time (user and system) its thread has used, in all: what averaging costs this process (every frame's
  // socket copies, fetches, reductions and updates run there). 0 without a thread of its own. Any thread.
  std::chrono::nanoseconds cpu_time() const;

  const ServiceOptions& options() const { return options_; }

  // The service's own state, its Asio context among it, which its links and handshakes reach through their
  // endpoints (dataplane/service_internals.hpp): no Asio in this header.
  struct Impl;

 private:
  explicit Service(ServiceOptions options);

  ServiceOptions options_;
  std::unique_ptr<Impl> impl_;
  std::string address_;
  std::atomic<std::uint64_t> handshakes_overflowed_{0};
  std::atomic<std::uint64_t> handshakes_busy_address_{0};
  std::atomic<std::uint64_t> strangers_{0};
  std::thread thread_;
  // The thread's CPU clock until stop(); then its last reading (so that a recycled thread id is never read). Under
  // cpu_mutex_.
  mutable std::mutex cpu_mutex_;
  std::optional<clockid_t> cpu_clock_;
  std::chrono::nanoseconds cpu_final_{0};
};

}  // namespace gridtrain::dataplane
