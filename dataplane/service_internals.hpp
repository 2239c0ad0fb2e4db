#pragma once
// The data plane's internals, shared by the files that implement it: an endpoint's state (endpoint.cpp), the
// service's (service.cpp), a link to one peer (link.cpp) and the handshakes that open links (link_handshakes.cpp).
// Not part of the data plane's interface: only dataplane/'s own .cpp files include it. Everything here runs on the
// service's thread unless it says otherwise.

#include <asio.hpp>

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "dataplane/admission.hpp"
#include "dataplane/service.hpp"
#include "dataplane/tls.hpp"
#include "dataplane/tls_async.hpp"

namespace gridtrain::dataplane {

using tcp = asio::ip::tcp;

// A dial's connect and handshake, all told: 5 s, not the kernel's two minutes of SYN retries.
inline constexpr auto kHandshakeTimeout = std::chrono::seconds(5);
// An accepted connection's token handshake: four messages of at most 72 bytes, two round trips (160 ms at 80 ms);
// a connection that sends no hello holds its place in the admission this long. TLS then has kHandshakeTimeout.
inline constexpr auto kAcceptTimeout = std::chrono::seconds(2);
inline constexpr auto kFirstRedial = std::chrono::milliseconds(50);
inline constexpr auto kLastRedial = std::chrono::seconds(2);
// How much one link reads or writes before it lets the others run (fairness on the one thread).
inline constexpr std::size_t kBurstBytes = std::size_t{8} << 20;
inline constexpr std::size_t kDrainBytes = 64 * 1024;
// Frames of a newer line version from a peer in this process, held until its line starts, at most.
inline constexpr std::size_t kMaxHeldLocalFrames = 4096;

struct Link;

// One node's part of the data plane (endpoint.cpp): its line runners, its links, what it counted and refused.
struct EndpointState : std::enable_shared_from_this<EndpointState>, Outbox {
  EndpointState(Service::Impl& service, EndpointSetup setup);

  // Outbox
  void send(std::uint64_t node, const FrameHeader& header, std::span<const std::byte> payload, SlotTag tag,
            std::uint32_t chunk) override;
  void retire(SlotTag tag) override;
  bool kernel_reads_payload(std::uint64_t node) const override;

  bool wanted(std::uint64_t peer) const;
  void update_links();
  void resume_waiting(std::uint32_t dim);
  void attach_inbound(const Hello& hello, tcp::socket socket, std::unique_ptr<TlsSession> tls);
  // Opens the links to a peer reached over `streams` connections (closes any beyond them).
  void set_streams(std::uint64_t peer, std::uint16_t streams);
  void deliver_local(std::uint64_t from, const FrameHeader& header, std::vector<std::byte> payload);
  void close();
  LineRunner* runner(std::uint32_t dim) { return dim < kMaxLineDims ? runners[dim].get() : nullptr; }

  Service::Impl& service;
  EndpointSetup setup;
  // Their own allocation: a reader on another thread (Endpoint::shared_counters) may hold them after the endpoint
  // and its service are gone.
  std::shared_ptr<std::array<DimensionCounters, kMaxLineDims>> shared_counters =
      std::make_shared<std::array<DimensionCounters, kMaxLineDims>>();
  std::array<DimensionCounters, kMaxLineDims>& counters = *shared_counters;
  std::array<std::unique_ptr<LineRunner>, kMaxLineDims> runners;
  // By peer and stream: a peer that this node dials has ServiceOptions::streams of them; one that dials this node
  // as many as its hello says; one in this process, stream 0 alone.
  std::map<std::pair<std::uint64_t, std::uint16_t>, std::shared_ptr<Link>> links;
  std::map<std::uint64_t, std::uint16_t> streams;  // how many of a peer's links its frames are spread over
  std::map<std::uint64_t, std::string> addresses;  // of the peers of our lines
  struct Held {
    std::uint64_t from;
    FrameHeader header;
    std::vector<std::byte> payload;
  };
  std::deque<Held> held;  // local frames of a newer line version
  struct Refused {
    std::atomic<std::uint64_t> handshakes{0}, bad_frames{0}, oversized{0}, truncated{0};
  } refused;
  std::atomic<std::uint32_t> unreachable{0};  // links that warned of a peer not reached (Link::fail), still wanted
  std::atomic<std::uint32_t> connections{0};  // TCP connections open, to every peer
  bool closed = false;
};

// The service's state (service.cpp): its acceptor, the process's endpoints, the admission of handshakes.
struct Service::Impl {
  // First: destroyed last, after everything below that holds its handlers' objects (the acceptor, the timers).
  asio::io_context io;
  // Keeps io.run() going until stop(); empty once stopped (or before start).
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  Service& service;
  std::optional<tcp::acceptor> acceptor;
  std::map<std::uint64_t, std::weak_ptr<EndpointState>> endpoints;
  bool stopped = false;
  // Handshakes under way, in all and per address (the service's thread only). Shared with them: a handshake still
  // pending when the service ends is destroyed with the io_context, after this Impl.
  std::shared_ptr<Admission> admission =
      std::make_shared<Admission>(Service::kMaxPendingHandshakes, Service::kMaxPendingPerAddress);
  // (what, node, peer) whose refusal was logged (the service's thread only): a peer that keeps redialing with a
  // bad certificate, or keeps sending bad frames, logs one line, not one a try.
  std::set<std::tuple<std::string_view, std::uint64_t, std::uint64_t>> refusals_logged;
  bool first_time(std::string_view what, std::uint64_t node, std::uint64_t peer) {
    return refusals_logged.size() < 4096 && refusals_logged.emplace(what, node, peer).second;
  }
  void count_stranger() { ++service.strangers_; }
  // Where every link reads the payloads it throws away (the service's thread only). On the heap, not
  // thread_local: 64 KB of static TLS made every thread of a gridnode process need that much more stack, and
  // civetweb's threads (the Prometheus endpoint), created with a small fixed stack, could not start (EINVAL).
  std::vector<std::byte> drain = std::vector<std::byte>(kDrainBytes);

  explicit Impl(Service& s) : service(s) {}
  std::shared_ptr<EndpointState> endpoint(std::uint64_t id) {
    auto it = endpoints.find(id);
    if (it == endpoints.end()) return nullptr;
    return it->second.lock();
  }
  void accept();
};

// One frame in a link's queue: its header, and its payload where it lies (a Round's buffer; or `owned`, once the
// round moved on while the frame was half written).
struct OutFrame {
  std::array<std::byte, kFrameHeaderBytes> header{};
  std::span<const std::byte> payload;
  std::vector<std::byte> owned;
  SlotTag tag;
  std::size_t sent = 0;  // bytes of header and payload written
  std::size_t size() const { return kFrameHeaderBytes + payload.size(); }
};

// The connection of one node to one peer node: TCP, or memory when the peer lives in this process.
struct Link : std::enable_shared_from_this<Link> {
  enum class State { waiting, connecting, handshaking, open, closed };

  Link(EndpointState& endpoint, std::uint64_t peer, std::uint16_t stream, bool local)
      : endpoint(endpoint), peer(peer), stream(stream), local(local), redial(endpoint.service.io) {}

  bool dialer() const { return endpoint.setup.node_id < peer; }
  DimensionCounters& counters(std::uint32_t dim) { return endpoint.counters[std::min(dim, kMaxLineDims - 1)]; }

  void enqueue(const FrameHeader& header, std::span<const std::byte> payload, SlotTag tag);
  void retire(SlotTag tag);
  void dial();
  void start_handshake_as_dialer(tcp::socket s);
  // The connection is through its handshakes: frames flow on it, through `tls` when the service runs TLS.
  void open_with(tcp::socket s, std::unique_ptr<TlsSession> tls);
  void fail(const std::string& why);
  void close();
  void pump_write();
  void pump_read();
  // One non-blocking write (gathered) or read on the socket, through TLS when the link runs it: bytes moved, or
  // what to wait for, or failed with the reason in io_error.
  TlsIo send_some(const iovec* iov, std::size_t n);
  TlsIo receive_some(std::byte* to, std::size_t want);
  // Waits until the socket is ready for `what`, with `armed` set meanwhile, then calls `go_on`; a link reset in
  // between (its generation moved on) is left alone.
  void await(tcp::socket::wait_type what, bool Link::*armed, void (Link::*go_on)());
  void resume();
  void drop_queue();
  // What was under way on the connection that ended: a frame half written (counted unsent) and the read state.
  void forget_stream();

  EndpointState& endpoint;
  std::uint64_t peer;
  std::uint16_t stream;  // which of the connections to the peer (EndpointState::links)
  bool local;
  State state = State::waiting;
  std::optional<tcp::socket> socket;
  std::unique_ptr<TlsSession> tls;  // with the socket, when the service runs TLS
  std::string io_error;
  std::deque<OutFrame> queue;
  bool write_armed = false;
  bool read_armed = false;
  bool paused = false;
  asio::steady_timer redial;
  std::chrono::milliseconds backoff = kFirstRedial;
  std::uint64_t generation = 0;  // of the socket: handlers of an older one do nothing
  // A dialer's: since when the link has had no connection (its creation, or the loss of its last one), and
  // whether that was warned about (and counted in the endpoint's `unreachable`).
  std::optional<std::chrono::steady_clock::time_point> unreachable_since;
  bool warned_unreachable = false;
  void reachable_again();

  // Reading: the header so far, then the payload's landing and how much of it came.
  std::array<std::byte, kFrameHeaderBytes> in_header{};
  std::size_t in_header_got = 0;
  bool in_payload = false;
  FrameHeader current;
  Landing landing;
  std::size_t payload_got = 0;
  std::vector<std::byte> staged;  // a compressed payload, read whole before it is decoded (capacity kept)
};

// The handshakes (link_handshakes.cpp, over dataplane/handshake_session.hpp): the dialer's over a connected
// socket, which opens the link or fails it; the acceptor's over an admitted connection, which attaches it to the
// endpoint the dialer asked for.
void start_dialer_handshake(std::shared_ptr<Link> link, tcp::socket socket);
void start_acceptor_handshake(Service::Impl& service, tcp::socket socket, Admission::Ticket ticket);

}  // namespace gridtrain::dataplane
