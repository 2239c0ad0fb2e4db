#include "dataplane/service.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <pthread.h>
#include <time.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

#include "dataplane/admission.hpp"
#include "dataplane/tls.hpp"

namespace gridtrain::dataplane {

namespace {

using tcp = asio::ip::tcp;
using Version = std::pair<std::uint64_t, std::uint64_t>;
using namespace std::chrono_literals;

// A dial's connect and handshake, all told: 5 s, not the kernel's two minutes of SYN retries.
constexpr auto kHandshakeTimeout = 5s;
// An accepted connection's token handshake: four messages of at most 72 bytes, two round trips (160 ms at 80 ms);
// a connection that sends no hello holds its place in the admission this long. TLS then has kHandshakeTimeout.
constexpr auto kAcceptTimeout = 2s;
constexpr auto kFirstRedial = 50ms;
constexpr auto kLastRedial = 2s;
// How much one link reads or writes before it lets the others run (fairness on the one thread).
constexpr std::size_t kBurstBytes = std::size_t{8} << 20;
constexpr std::size_t kDrainBytes = 64 * 1024;
// Frames of a newer line version from a peer in this process, held until its line starts, at most.
constexpr std::size_t kMaxHeldLocalFrames = 4096;

Result<std::pair<std::string, std::uint16_t>> split_address(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return Error{.message = "no host:port: " + address};
  const std::string port = address.substr(colon + 1);
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit))
    return Error{.message = "bad port in " + address};
  const unsigned long value = std::stoul(port);
  if (value == 0 || value > 65535) return Error{.message = "bad port in " + address};
  return std::pair<std::string, std::uint16_t>{address.substr(0, colon), static_cast<std::uint16_t>(value)};
}

void tune(tcp::socket& socket, int buffer_bytes) {
  std::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  if (buffer_bytes > 0) {
    socket.set_option(asio::socket_base::send_buffer_size(buffer_bytes), ignored);
    socket.set_option(asio::socket_base::receive_buffer_size(buffer_bytes), ignored);
  }
  socket.non_blocking(true, ignored);
}

// A thread's CPU time by its clock; 0 if the clock cannot be read.
std::chrono::nanoseconds thread_cpu(clockid_t clock) {
  timespec t{};
  if (clock_gettime(clock, &t) != 0) return std::chrono::nanoseconds(0);
  return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
}

}  // namespace

// -- links -------------------------------------------------------------------------------------------------------

struct Link;

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

struct Service::Impl {
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
      : endpoint(endpoint), peer(peer), stream(stream), local(local), redial(endpoint.service.service.context()) {}

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

void Link::enqueue(const FrameHeader& header, std::span<const std::byte> payload, SlotTag tag) {
  DimensionCounters& c = counters(tag.dim);
  if (state == State::closed) {
    ++c.frames_unsent;
    return;
  }
  if (local) {
    auto target = endpoint.service.endpoint(peer);
    if (!target) {
      ++c.frames_unsent;
      return;
    }
    std::vector<std::byte> copy(payload.begin(), payload.end());
    ++c.frames_sent;
    c.bytes_sent += payload.size();
    asio::post(endpoint.service.service.context(),
               [target = std::weak_ptr<EndpointState>(target), from = endpoint.setup.node_id, header,
                copy = std::move(copy)]() mutable {
                 if (auto t = target.lock()) t->deliver_local(from, header, std::move(copy));
               });
    return;
  }
  OutFrame& f = queue.emplace_back();
  encode(header, std::span<std::byte, kFrameHeaderBytes>(f.header));
  f.payload = payload;
  f.tag = tag;
  pump_write();
}

void Link::retire(SlotTag tag) {
  for (auto it = queue.begin(); it != queue.end();) {
    if (!(it->tag == tag) || !it->owned.empty()) {
      ++it;
      continue;
    }
    if (it->sent == 0) {
      ++counters(tag.dim).frames_unsent;
      it = queue.erase(it);
      continue;
    }
    // Half written: the rest must still go, or the stream loses its framing. Copied aside, once per frame, unless it
    // lies in the model itself, which stays where it is (and which only the kernel may read without a lock).
    const std::span<const std::byte> model = std::as_bytes(endpoint.setup.model.memory);
    const std::less<const std::byte*> before;
    if (!before(it->payload.data(), model.data()) && before(it->payload.data(), model.data() + model.size())) {
      ++it;
      continue;
    }
    it->owned.assign(it->payload.begin(), it->payload.end());
    it->payload = std::span<const std::byte>(it->owned);
    ++it;
  }
}

void Link::drop_queue() {
  for (const OutFrame& f : queue) ++counters(f.tag.dim).frames_unsent;
  queue.clear();
}

void Link::reachable_again() {
  if (warned_unreachable) {
    --endpoint.unreachable;
    spdlog::info("data plane: node {:016x} reached node {:016x} again", endpoint.setup.node_id, peer);
  }
  unreachable_since.reset();
  warned_unreachable = false;
}

void Link::close() {
  if (warned_unreachable) --endpoint.unreachable;  // no longer wanted: nothing to reach
  warned_unreachable = false;
  if (state == State::open && !local) --endpoint.connections;
  state = State::closed;
  ++generation;
  redial.cancel();
  drop_queue();
  if (socket) {
    std::error_code ignored;
    socket->close(ignored);
    socket.reset();
  }
  tls.reset();
}

void Link::fail(const std::string& why) {
  if (state == State::closed) return;
  auto address = endpoint.addresses.find(peer);
  const std::string at = address == endpoint.addresses.end() ? "?" : address->second;
  const std::string which = stream == 0 ? "" : fmt::format(" (connection {})", stream);
  if (state == State::open) {
    --endpoint.connections;
    spdlog::info("data plane: node {:016x} lost its connection to node {:016x}{}: {}", endpoint.setup.node_id, peer,
                 which, why);
  } else {
    spdlog::info("data plane: node {:016x} could not connect to node {:016x} at {}{}: {}", endpoint.setup.node_id,
                 peer, at, which, why);
  }
  const auto now = std::chrono::steady_clock::now();
  if (!unreachable_since) unreachable_since = now;
  const auto warn_after = endpoint.service.service.options().unreachable_warning;
  // A peer is warned about (and counted) once, by its first connection.
  if (dialer() && stream == 0 && !warned_unreachable && now - *unreachable_since >= warn_after) {
    warned_unreachable = true;
    ++endpoint.unreachable;
    spdlog::warn("data plane: node {:016x} has not reached node {:016x} at {} for {:.1f} s ({}); their lines' rounds "
                 "go without each other's values until it does: check that address, and that the data port is "
                 "open between the machines",
                 endpoint.setup.node_id, peer, at, std::chrono::duration<double>(now - *unreachable_since).count(),
                 why);
  }
  ++generation;
  if (socket) {
    std::error_code ignored;
    socket->close(ignored);
    socket.reset();
  }
  tls.reset();
  // A frame half written or half read is lost with the stream; the rest wait for the next connection.
  if (!queue.empty() && queue.front().sent > 0) {
    ++counters(queue.front().tag.dim).frames_unsent;
    queue.pop_front();
  }
  in_header_got = 0;
  in_payload = false;
  paused = false;
  write_armed = read_armed = false;
  state = State::waiting;
  if (dialer() && endpoint.wanted(peer)) {
    redial.expires_after(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(kLastRedial));
    redial.async_wait([self = shared_from_this(), g = generation](std::error_code e) {
      if (!e && self->generation == g && self->state == State::waiting) self->dial();
    });
  }
}

void Link::dial() {
  auto address = endpoint.addresses.find(peer);
  if (address == endpoint.addresses.end() || state != State::waiting) return;
  auto parts = split_address(address->second);
  if (!parts) {
    spdlog::warn("data plane: node {:016x}: peer {:016x} has no usable data address: {}", endpoint.setup.node_id,
                 peer, parts.error().message);
    return;
  }
  state = State::connecting;
  auto resolver = std::make_shared<tcp::resolver>(endpoint.service.service.context());
  resolver->async_resolve(
      parts.value().first, std::to_string(parts.value().second),
      [self = shared_from_this(), resolver, g = generation](std::error_code e, tcp::resolver::results_type results) {
        if (self->generation != g || self->state != State::connecting) return;
        if (e) return self->fail("cannot resolve its data address: " + e.message());
        auto s = std::make_shared<tcp::socket>(self->endpoint.service.service.context());
        // A firewall that drops the SYNs would hold the connect for the kernel's two minutes of retries.
        auto deadline = std::make_shared<asio::steady_timer>(self->endpoint.service.service.context());
        deadline->expires_after(kHandshakeTimeout);
        deadline->async_wait([s](std::error_code e) {
          if (!e) s->close();
        });
        asio::async_connect(*s, results, [self, s, deadline, g](std::error_code e, const tcp::endpoint&) {
          deadline->cancel();
          if (self->generation != g || self->state != State::connecting) return;
          if (e == asio::error::operation_aborted) return self->fail("cannot connect: no answer within the timeout");
          if (e) return self->fail("cannot connect: " + e.message());
          self->start_handshake_as_dialer(std::move(*s));
        });
      });
}

// The dialer's half of dataplane/handshake.hpp, with a deadline.
struct DialerHandshake : std::enable_shared_from_this<DialerHandshake> {
  DialerHandshake(std::shared_ptr<Link> link, tcp::socket s)
      : link(std::move(link)), socket(std::move(s)), timer(socket.get_executor()) {}

  void run() {
    timer.expires_after(kHandshakeTimeout);
    timer.async_wait([self = shared_from_this()](std::error_code e) {
      if (!e) self->socket.close();
    });
    const std::uint32_t protocol = kDataProtocol | (tls_context() ? kTlsFlag : 0u);
    const Hello hello{protocol, link->endpoint.setup.node_id, link->peer, link->stream,
                      link->endpoint.service.service.options().streams, make_nonce()};
    nonce = hello.nonce;
    encode(hello, std::span<std::byte, kHelloBytes>(hello_bytes));
    asio::async_write(socket, asio::buffer(hello_bytes), [self = shared_from_this()](std::error_code e, std::size_t) {
      if (e) return self->done("cannot send its hello: " + e.message());
      asio::async_read(self->socket, asio::buffer(self->challenge_bytes),
                       [self](std::error_code e, std::size_t) { self->on_challenge(e); });
    });
  }

  void on_challenge(std::error_code e) {
    if (e) return done("no challenge: " + e.message());
    auto challenge = decode_challenge(challenge_bytes);
    if (!challenge) return done(challenge.error().message);
    if (challenge.value().refusal != Refusal::none) {
      if (challenge.value().refusal == Refusal::tls_mismatch) ++link->endpoint.refused.handshakes;
      return done("refused: " + to_string(challenge.value().refusal));
    }
    const auto& setup = link->endpoint.setup;
    if (!equal_macs(challenge.value().mac, acceptor_mac(setup.mac, nonce, setup.node_id, link->peer))) {
      ++link->endpoint.refused.handshakes;
      return done("it does not hold the cluster token");
    }
    encode(Proof{dialer_mac(setup.mac, challenge.value().nonce, setup.node_id, link->peer)},
           std::span<std::byte, kProofBytes>(proof_bytes));
    asio::async_write(socket, asio::buffer(proof_bytes), [self = shared_from_this()](std::error_code e, std::size_t) {
      if (e) return self->done("cannot send its proof: " + e.message());
      asio::async_read(self->socket, asio::buffer(self->verdict_bytes),
                       [self](std::error_code e, std::size_t) { self->on_verdict(e); });
    });
  }

  void on_verdict(std::error_code e) {
    if (e) return done("no verdict: " + e.message());
    auto verdict = decode_verdict(verdict_bytes);
    if (!verdict) return done(verdict.error().message);
    if (verdict.value().refusal != Refusal::none) {
      ++link->endpoint.refused.handshakes;
      return done("refused: " + to_string(verdict.value().refusal));
    }
    if (!tls_context()) {
      timer.cancel();
      return link->open_with(std::move(socket), nullptr);
    }
    std::error_code ignored;
    socket.non_blocking(true, ignored);
    session = std::make_unique<TlsSession>(*tls_context(), socket.native_handle(), TlsRole::dialer);
    async_tls_handshake(socket, *session, [self = shared_from_this()](bool ok) {
      if (!ok) {
        ++self->link->endpoint.refused.handshakes;
        const std::string& why = self->session->error();
        return self->done("TLS: " + (why.empty() ? std::string("timed out") : why));
      }
      self->timer.cancel();
      self->link->open_with(std::move(self->socket), std::move(self->session));
    });
  }

  const std::shared_ptr<const TlsContext>& tls_context() const {
    return link->endpoint.service.service.options().tls;
  }

  void done(const std::string& why) {
    timer.cancel();
    link->fail(why);
  }

  std::shared_ptr<Link> link;
  tcp::socket socket;
  asio::steady_timer timer;
  std::unique_ptr<TlsSession> session;
  Nonce nonce{};
  std::array<std::byte, kHelloBytes> hello_bytes{};
  std::array<std::byte, kChallengeBytes> challenge_bytes{};
  std::array<std::byte, kProofBytes> proof_bytes{};
  std::array<std::byte, kVerdictBytes> verdict_bytes{};
};

void Link::start_handshake_as_dialer(tcp::socket s) {
  state = State::handshaking;
  std::make_shared<DialerHandshake>(shared_from_this(), std::move(s))->run();
}

void Link::open_with(tcp::socket s, std::unique_ptr<TlsSession> session) {
  if (socket) {
    std::error_code ignored;
    socket->close(ignored);
  }
  ++generation;
  if (state != State::open) ++endpoint.connections;
  tune(s, endpoint.service.service.options().socket_buffer_bytes);
  socket.emplace(std::move(s));
  tls = std::move(session);
  state = State::open;
  backoff = kFirstRedial;
  reachable_again();
  // A frame half written on an older connection cannot be finished on this one.
  if (!queue.empty() && queue.front().sent > 0) {
    ++counters(queue.front().tag.dim).frames_unsent;
    queue.pop_front();
  }
  in_header_got = 0;
  in_payload = false;
  paused = false;
  write_armed = read_armed = false;
  pump_read();
  pump_write();
}

void Link::pump_write() {
  if (state != State::open || write_armed) return;
  std::size_t burst = 0;
  while (!queue.empty() && burst < kBurstBytes) {
    // Gather as many frames as one call may take, straight from their buffers.
    std::array<iovec, 64> iov{};
    std::size_t n = 0;
    for (auto it = queue.begin(); it != queue.end() && n + 2 <= iov.size(); ++it) {
      std::size_t skip = it->sent;
      if (skip < kFrameHeaderBytes) {
        iov[n++] = {const_cast<std::byte*>(it->header.data()) + skip, kFrameHeaderBytes - skip};
        skip = 0;
      } else {
        skip -= kFrameHeaderBytes;
      }
      if (skip < it->payload.size())
        iov[n++] = {const_cast<std::byte*>(it->payload.data()) + skip, it->payload.size() - skip};
    }
    const TlsIo wrote = send_some(iov.data(), n);
    if (wrote.failed) return fail(io_error);
    if (wrote.bytes == 0)
      return await(wrote.want == TlsWant::read ? tcp::socket::wait_read : tcp::socket::wait_write, &Link::write_armed,
                   &Link::pump_write);
    burst += wrote.bytes;
    std::size_t left = wrote.bytes;
    while (left > 0) {
      OutFrame& f = queue.front();
      const std::size_t take = std::min(left, f.size() - f.sent);
      f.sent += take;
      left -= take;
      if (f.sent == f.size()) {
        DimensionCounters& c = counters(f.tag.dim);
        ++c.frames_sent;
        c.bytes_sent += f.payload.size();
        queue.pop_front();
      }
    }
  }
  if (!queue.empty())  // the burst is over: let the other links run, then go on
    asio::post(endpoint.service.service.context(), [self = shared_from_this(), g = generation] {
      if (self->generation == g) self->pump_write();
    });
}

TlsIo Link::send_some(const iovec* iov, std::size_t n) {
  if (!tls) {
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov);
    msg.msg_iovlen = n;
    for (;;) {
      const ssize_t wrote = ::sendmsg(socket->native_handle(), &msg, MSG_NOSIGNAL);
      if (wrote >= 0) return {.bytes = static_cast<std::size_t>(wrote)};
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return {.want = TlsWant::write};
      io_error = std::strerror(errno);
      return {.failed = true};
    }
  }
  // TLS takes one buffer at a time and encrypts it from where it lies, a record at a time. A call that would block
  // is repeated later from the same byte on, as OpenSSL requires.
  std::size_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto* from = static_cast<const std::byte*>(iov[i].iov_base);
    for (std::size_t done = 0; done < iov[i].iov_len;) {
      const TlsIo io = tls->write(from + done, iov[i].iov_len - done);
      if (io.failed) io_error = tls->error();
      if (io.bytes == 0) return total > 0 ? TlsIo{.bytes = total} : io;
      done += io.bytes;
      total += io.bytes;
    }
  }
  return {.bytes = total};
}

TlsIo Link::receive_some(std::byte* to, std::size_t want) {
  if (tls) {
    const TlsIo io = tls->read(to, want);
    if (io.failed) io_error = tls->error();
    return io;
  }
  for (;;) {
    const ssize_t got = ::recv(socket->native_handle(), to, want, 0);
    if (got > 0) return {.bytes = static_cast<std::size_t>(got)};
    if (got == 0) {
      io_error = "the peer closed the connection";
      return {.failed = true};
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {.want = TlsWant::read};
    io_error = std::strerror(errno);
    return {.failed = true};
  }
}

void Link::await(tcp::socket::wait_type what, bool Link::*armed, void (Link::*go_on)()) {
  this->*armed = true;
  socket->async_wait(what, [self = shared_from_this(), g = generation, armed, go_on](std::error_code e) {
    if (self->generation != g) return;
    (*self).*armed = false;
    if (e) return self->fail(e.message());
    ((*self).*go_on)();
  });
}

void Link::pump_read() {
  if (state != State::open || read_armed || paused) return;
  std::vector<std::byte>& drain = endpoint.service.drain;
  std::size_t burst = 0;
  while (burst < kBurstBytes) {
    std::byte* to = nullptr;
    std::size_t want = 0;
    if (!in_payload) {
      to = in_header.data() + in_header_got;
      want = kFrameHeaderBytes - in_header_got;
    } else {
      const std::size_t total = current.payload_bytes();
      // The line changed while this payload came: the Round it was going into is gone.
      if (landing.kind == Landing::Kind::direct) {
        LineRunner* runner = endpoint.runner(current.key.dim);
        if (!runner || runner->generation() != landing.generation) landing.kind = Landing::Kind::drain;
      }
      switch (landing.kind) {
        case Landing::Kind::direct:
          to = current.wire == allreduce::WireFormat::fp32
                   ? reinterpret_cast<std::byte*>(landing.into.data()) + payload_got
                   : staged.data() + payload_got;
          break;
        default: to = drain.data(); break;
      }
      want = total - payload_got;
      if (landing.kind == Landing::Kind::drain) want = std::min(want, drain.size());
    }
    std::size_t got = 0;
    if (want != 0) {
      const TlsIo io = receive_some(to, want);
      if (io.failed) {
        if (in_payload || in_header_got > 0) ++endpoint.refused.truncated;
        return fail(io_error);
      }
      if (io.bytes == 0)
        return await(io.want == TlsWant::write ? tcp::socket::wait_write : tcp::socket::wait_read, &Link::read_armed,
                     &Link::pump_read);
      got = io.bytes;
    }
    burst += got;
    if (!in_payload) {
      in_header_got += got;
      if (in_header_got < kFrameHeaderBytes) continue;
      auto header = decode_frame_header(in_header);
      if (!header) {
        ++endpoint.refused.bad_frames;
        if (endpoint.service.first_time("bad frame", endpoint.setup.node_id, peer))
          spdlog::warn("data plane: node {:016x}: node {:016x} sent a bad frame ({}); closing its connection (said "
                       "once per peer)",
                       endpoint.setup.node_id, peer, header.error().message);
        return fail("a bad frame");
      }
      current = header.value();
      in_header_got = 0;
      resume();
      return;  // resume() goes on reading, or leaves the link paused
    }
    payload_got += got;
    if (LineRunner* runner = endpoint.runner(current.key.dim)) runner->receiving();
    if (payload_got < current.payload_bytes()) continue;
    in_payload = false;
    if (landing.kind == Landing::Kind::direct) {
      if (LineRunner* runner = endpoint.runner(current.key.dim)) runner->landed(current, landing, staged);
    }
  }
  asio::post(endpoint.service.service.context(), [self = shared_from_this(), g = generation] {
    if (self->generation == g) self->pump_read();
  });
}

// The header in `current` is read: find where its payload goes (again, after a wait), then read on.
void Link::resume() {
  LineRunner* runner = endpoint.runner(current.key.dim);
  landing = runner ? runner->land(peer, current) : Landing{};
  if (!runner) landing.kind = Landing::Kind::refuse;
  switch (landing.kind) {
    case Landing::Kind::wait: paused = true; return;
    case Landing::Kind::refuse:
      ++endpoint.refused.oversized;
      if (endpoint.service.first_time("frame too long", endpoint.setup.node_id, peer))
        spdlog::warn("data plane: node {:016x}: node {:016x} sent a frame of {} floats, more than any line of ours "
                     "carries; closing its connection (said once per peer)",
                     endpoint.setup.node_id, peer, current.length);
      return fail("a frame too long");
    default: break;
  }
  paused = false;
  in_payload = true;
  payload_got = 0;
  // At most a line's largest chunk (land() refused longer), encoded: no larger than its fp32 payload.
  if (landing.kind == Landing::Kind::direct && current.wire != allreduce::WireFormat::fp32)
    staged.resize(current.payload_bytes());
  pump_read();
}

// -- endpoints ---------------------------------------------------------------------------------------------------

EndpointState::EndpointState(Service::Impl& service, EndpointSetup s) : service(service), setup(std::move(s)) {
  for (std::uint32_t d = 0; d < kMaxLineDims; ++d)
    runners[d] = std::make_unique<LineRunner>(d, setup.node_id, setup.model, *this,
                                              [this](const RoundEvent& e) {
                                                if (!closed && setup.on_event) setup.on_event(e);
                                              },
                                              counters[d]);
}

bool EndpointState::kernel_reads_payload(std::uint64_t node) const {
  const auto it = links.find({node, 0});
  return it != links.end() && !it->second->local && !service.service.options().tls;
}

void EndpointState::send(std::uint64_t node, const FrameHeader& header, std::span<const std::byte> payload,
                         SlotTag tag, std::uint32_t chunk) {
  const auto n = streams.find(node);
  const auto stream = static_cast<std::uint16_t>(n == streams.end() ? 0 : chunk % n->second);
  auto it = links.find({node, stream});
  if (it == links.end()) it = links.find({node, 0});
  if (it == links.end()) {
    ++counters[std::min(tag.dim, kMaxLineDims - 1)].frames_unsent;
    return;
  }
  it->second->enqueue(header, payload, tag);
}

void EndpointState::retire(SlotTag tag) {
  for (auto& [key, link] : links) link->retire(tag);
}

bool EndpointState::wanted(std::uint64_t peer) const {
  for (const auto& r : runners)
    if (const LineSpec* line = r->line())
      if (std::find(line->peers.begin(), line->peers.end(), peer) != line->peers.end()) return true;
  return false;
}

// Links to the peers of our lines, and none to others.
void EndpointState::update_links() {
  for (auto it = links.begin(); it != links.end();) {
    if (wanted(it->first.first)) {
      ++it;
      continue;
    }
    it->second->close();
    it = links.erase(it);
  }
  std::erase_if(streams, [this](const auto& s) { return !wanted(s.first); });
  std::set<std::uint64_t> peers;
  for (const auto& r : runners)
    if (const LineSpec* line = r->line())
      for (std::uint64_t p : line->peers)
        if (p != setup.node_id) peers.insert(p);
  for (std::uint64_t p : peers) {
    if (links.count({p, 0})) continue;
    const bool local = service.endpoint(p) != nullptr;
    if (local) {
      auto link = std::make_shared<Link>(*this, p, 0, true);
      link->state = Link::State::open;
      links.emplace(std::pair{p, std::uint16_t{0}}, link);
      streams[p] = 1;
    } else if (setup.node_id < p) {
      set_streams(p, service.service.options().streams);
    } else {
      set_streams(p, streams.count(p) ? streams[p] : std::uint16_t{1});  // until its dialer's hello says
    }
  }
}

void EndpointState::set_streams(std::uint64_t peer, std::uint16_t count) {
  streams[peer] = count;
  for (auto it = links.lower_bound({peer, count}); it != links.end() && it->first.first == peer;) {
    it->second->close();
    it = links.erase(it);
  }
  for (std::uint16_t k = 0; k < count; ++k) {
    if (links.count({peer, k})) continue;
    auto link = std::make_shared<Link>(*this, peer, k, false);
    links.emplace(std::pair{peer, k}, link);
    if (link->dialer()) {
      link->unreachable_since = std::chrono::steady_clock::now();
      link->dial();
    }
  }
}

void EndpointState::resume_waiting(std::uint32_t dim) {
  for (auto& [key, link] : links)
    if (link->paused && link->current.key.dim == dim) link->resume();
  // Local frames held for this dimension's new line: land them now, or hold them on.
  std::deque<Held> waiting;
  waiting.swap(held);
  for (Held& h : waiting) {
    if (h.header.key.dim == dim)
      deliver_local(h.from, h.header, std::move(h.payload));
    else
      held.push_back(std::move(h));
  }
}

void EndpointState::attach_inbound(const Hello& hello, tcp::socket socket, std::unique_ptr<TlsSession> tls) {
  // Its dialer decides how many connections there are. A peer that dials before our line with it started: keep
  // the connection; the line will want it.
  const auto n = streams.find(hello.from_node);
  if (n == streams.end() || n->second != hello.streams) set_streams(hello.from_node, hello.streams);
  links.at({hello.from_node, hello.stream})->open_with(std::move(socket), std::move(tls));
}

void EndpointState::deliver_local(std::uint64_t from, const FrameHeader& header, std::vector<std::byte> payload) {
  if (closed) return;
  LineRunner* r = runner(header.key.dim);
  if (!r || payload.size() != header.payload_bytes()) return;
  const Landing landing = r->land(from, header);
  switch (landing.kind) {
    case Landing::Kind::wait:
      if (held.size() < kMaxHeldLocalFrames) held.push_back({from, header, std::move(payload)});
      return;
    case Landing::Kind::direct:
      if (header.wire == allreduce::WireFormat::fp32) {
        std::memcpy(landing.into.data(), payload.data(), payload.size());
        r->landed(header, landing);
      } else {
        r->landed(header, landing, payload);
      }
      return;
    case Landing::Kind::refuse: ++refused.oversized; return;
    case Landing::Kind::drain: return;
  }
}

void EndpointState::close() {
  if (closed) return;
  closed = true;
  for (auto& r : runners) r->drop_line();
  for (auto& [key, link] : links) link->close();
  links.clear();
  streams.clear();
  held.clear();
  service.endpoints.erase(setup.node_id);
}

Endpoint::Endpoint(std::shared_ptr<Service> service, std::shared_ptr<EndpointState> state)
    : service_(std::move(service)), state_(std::move(state)) {}

Endpoint::~Endpoint() { close(); }

std::uint64_t Endpoint::node_id() const { return state_->setup.node_id; }

void Endpoint::start_line(LineSpec spec, std::vector<std::string> data_addresses) {
  asio::post(service_->context(), [s = state_, spec = std::move(spec), data_addresses = std::move(data_addresses)]() {
    if (s->closed || spec.dim >= kMaxLineDims) return;
    for (std::size_t i = 0; i < spec.peers.size() && i < data_addresses.size(); ++i)
      s->addresses[spec.peers[i]] = data_addresses[i];
    const std::uint32_t dim = spec.dim;
    if (!s->runners[dim]->start_line(spec)) return;
    s->update_links();
    s->resume_waiting(dim);
  });
}

void Endpoint::drop_line(std::uint32_t dim, std::optional<std::pair<std::uint64_t, std::uint64_t>> older_than) {
  asio::post(service_->context(), [s = state_, dim, older_than] {
    if (s->closed || dim >= kMaxLineDims) return;
    s->runners[dim]->drop_line(older_than);
    s->update_links();
  });
}

void Endpoint::start_round(const allreduce::RoundKey& key) {
  asio::post(service_->context(), [s = state_, key] {
    if (!s->closed && key.dim < kMaxLineDims) s->runners[key.dim]->start_round(key);
  });
}

void Endpoint::deadline(const allreduce::RoundKey& key) {
  asio::post(service_->context(), [s = state_, key] {
    if (!s->closed && key.dim < kMaxLineDims) s->runners[key.dim]->deadline(key);
  });
}

const DimensionCounters& Endpoint::counters(std::uint32_t dim) const { return state_->counters[dim]; }

std::shared_ptr<const std::array<DimensionCounters, kMaxLineDims>> Endpoint::shared_counters() const {
  return state_->shared_counters;
}

std::uint32_t Endpoint::unreachable_peers() const { return state_->unreachable.load(); }

std::uint32_t Endpoint::connections() const { return state_->connections.load(); }

LinkRefusals Endpoint::refusals() const {
  const auto& r = state_->refused;
  return {r.handshakes.load(), r.bad_frames.load(), r.oversized.load(), r.truncated.load()};
}

void Endpoint::close() {
  if (!state_) return;
  asio::post(service_->context(), [s = state_] { s->close(); });
}

// -- the service -------------------------------------------------------------------------------------------------

// The acceptor's half of dataplane/handshake.hpp: which node the dialer wants, and whether it holds the token.
struct AcceptorHandshake : std::enable_shared_from_this<AcceptorHandshake> {
  AcceptorHandshake(Service::Impl& service, tcp::socket s, Admission::Ticket ticket)
      : service(service), socket(std::move(s)), timer(socket.get_executor()), ticket(std::move(ticket)) {}

  // Closes the connection unless the handshake is through within `limit` from now (replaces the limit before).
  void close_after(std::chrono::steady_clock::duration limit) {
    timer.expires_after(limit);
    timer.async_wait([self = shared_from_this()](std::error_code e) {
      if (!e) self->socket.close();
    });
  }

  void run() {
    close_after(kAcceptTimeout);
    asio::async_read(socket, asio::buffer(hello_bytes),
                     [self = shared_from_this()](std::error_code e, std::size_t) { self->on_hello(e); });
  }

  void on_hello(std::error_code e) {
    if (e) return stranger();  // silent past the handshake's time, or gone
    auto hello = decode_hello(hello_bytes);
    if (!hello) return stranger();  // not ours: a stranger gets no answer
    this->hello = hello.value();
    Challenge challenge;
    endpoint = service.endpoint(this->hello.to_node);
    const bool dialer_tls = (this->hello.protocol & kTlsFlag) != 0;
    const bool streams_valid = this->hello.streams >= 1 && this->hello.streams <= kMaxStreams &&
                               this->hello.stream < this->hello.streams;
    if ((this->hello.protocol & ~kTlsFlag) != kDataProtocol || !streams_valid)
      challenge.refusal = Refusal::protocol;
    else if (dialer_tls != (tls_context() != nullptr))
      challenge.refusal = Refusal::tls_mismatch;
    else if (!endpoint)
      challenge.refusal = Refusal::unknown_node;
    if (challenge.refusal == Refusal::none) {
      challenge.nonce = nonce = make_nonce();
      challenge.mac = acceptor_mac(endpoint->setup.mac, this->hello.nonce, this->hello.from_node, this->hello.to_node);
    }
    encode(challenge, std::span<std::byte, kChallengeBytes>(challenge_bytes));
    const bool go_on = challenge.refusal == Refusal::none;
    if (challenge.refusal == Refusal::tls_mismatch && endpoint)
      ++endpoint->refused.handshakes;
    else if (!go_on)
      service.count_stranger();
    asio::async_write(socket, asio::buffer(challenge_bytes),
                      [self = shared_from_this(), go_on](std::error_code e, std::size_t) {
                        if (e || !go_on) return self->end();
                        asio::async_read(self->socket, asio::buffer(self->proof_bytes),
                                         [self](std::error_code e, std::size_t) { self->on_proof(e); });
                      });
  }

  void on_proof(std::error_code e) {
    if (e) return end();
    auto proof = decode_proof(proof_bytes);
    Verdict verdict;
    if (!proof || !equal_macs(proof.value().mac,
                              dialer_mac(endpoint->setup.mac, nonce, hello.from_node, hello.to_node))) {
      verdict.refusal = Refusal::bad_proof;
      ++endpoint->refused.handshakes;
      if (service.first_time("bad proof", hello.to_node, hello.from_node))
        spdlog::warn("data plane: node {:016x}: refused a connection from node {:016x}: it does not hold the cluster "
                     "token (said once per peer)",
                     hello.to_node, hello.from_node);
    }
    encode(verdict, std::span<std::byte, kVerdictBytes>(verdict_bytes));
    const bool ok = verdict.refusal == Refusal::none;
    asio::async_write(socket, asio::buffer(verdict_bytes), [self = shared_from_this(), ok](std::error_code e,
                                                                                           std::size_t) {
      if (e || !ok || self->endpoint->closed) return self->end();
      if (!self->tls_context()) {
        self->timer.cancel();
        return self->endpoint->attach_inbound(self->hello, std::move(self->socket), nullptr);
      }
      self->start_tls();
    });
  }

  void start_tls() {
    std::error_code ignored;
    socket.non_blocking(true, ignored);
    close_after(kHandshakeTimeout);  // TLS's round trips and certificates, after the token's
    session = std::make_unique<TlsSession>(*tls_context(), socket.native_handle(), TlsRole::acceptor);
    async_tls_handshake(socket, *session, [self = shared_from_this()](bool ok) {
      if (ok && !self->endpoint->closed) {
        self->timer.cancel();
        return self->endpoint->attach_inbound(self->hello, std::move(self->socket), std::move(self->session));
      }
      if (!ok) {
        ++self->endpoint->refused.handshakes;
        if (self->service.first_time("tls", self->hello.to_node, self->hello.from_node)) {
          const std::string& why = self->session->error();
          spdlog::warn("data plane: node {:016x}: refused a connection from node {:016x}: TLS: {} (said once per "
                       "peer)",
                       self->hello.to_node, self->hello.from_node, why.empty() ? std::string("timed out") : why);
        }
      }
      self->end();
    });
  }

  const std::shared_ptr<const TlsContext>& tls_context() const { return service.service.options().tls; }

  void stranger() {
    service.count_stranger();
    end();
  }

  void end() {
    timer.cancel();
    std::error_code ignored;
    socket.close(ignored);
  }

  Service::Impl& service;
  tcp::socket socket;
  asio::steady_timer timer;
  std::unique_ptr<TlsSession> session;
  Admission::Ticket ticket;  // its place among the handshakes under way
  Hello hello;
  Nonce nonce{};
  std::shared_ptr<EndpointState> endpoint;
  std::array<std::byte, kHelloBytes> hello_bytes{};
  std::array<std::byte, kChallengeBytes> challenge_bytes{};
  std::array<std::byte, kProofBytes> proof_bytes{};
  std::array<std::byte, kVerdictBytes> verdict_bytes{};
};

void Service::Impl::accept() {
  acceptor->async_accept([this](std::error_code e, tcp::socket s) {
    if (stopped) return;
    if (!e) {
      std::error_code ignored;
      const auto from = s.remote_endpoint(ignored).address().to_string();
      auto admitted = admission->admit(from);
      if (admitted.ticket) {
        std::make_shared<AcceptorHandshake>(*this, std::move(s), std::move(*admitted.ticket))->run();
      } else {
        ++(admitted.busy == Admission::Busy::address ? service.handshakes_busy_address_
                                                    : service.handshakes_overflowed_);
        answer_busy(s.native_handle());
        s.close(ignored);
      }
    }
    if (e != asio::error::operation_aborted) accept();
  });
}

Service::Service(ServiceOptions options) : options_(std::move(options)), impl_(std::make_unique<Impl>(*this)) {}

Result<std::shared_ptr<Service>> Service::start(ServiceOptions options) {
  std::shared_ptr<Service> service(new Service(std::move(options)));
  const ServiceOptions& o = service->options_;
  if (o.listen) {
    std::error_code e;
    const auto host = asio::ip::make_address(o.host, e);
    if (e) return Error{.message = "data plane: cannot listen on " + o.host + ": not an IP address"};
    tcp::acceptor acceptor(service->io_);
    const tcp::endpoint at(host, o.port);
    acceptor.open(at.protocol(), e);
    if (!e) acceptor.set_option(tcp::acceptor::reuse_address(true), e);
    if (!e) acceptor.bind(at, e);
    if (!e) acceptor.listen(asio::socket_base::max_listen_connections, e);
    if (e)
      return Error{.message = "data plane: cannot listen on " + o.host + ":" + std::to_string(o.port) + ": " +
                              e.message()};
    const auto bound = acceptor.local_endpoint();
    service->address_ = o.host + ":" + std::to_string(bound.port());
    service->impl_->acceptor.emplace(std::move(acceptor));
    service->impl_->accept();
  }
  service->work_.emplace(asio::make_work_guard(service->io_));
  if (o.own_thread) {
    // The thread runs until stop() (the work guard), so its clock is valid from here until stop() replaces it by
    // its last reading. The thread touches nothing of the Service after io_.run(): a Service destroyed on its own
    // thread (stop()'s detach) is gone by then.
    service->thread_ = std::thread([s = service.get()] { s->io_.run(); });
    clockid_t id;
    std::lock_guard<std::mutex> hold(service->cpu_mutex_);
    if (pthread_getcpuclockid(service->thread_.native_handle(), &id) == 0) service->cpu_clock_ = id;
  }
  return service;
}

std::chrono::nanoseconds Service::cpu_time() const {
  std::lock_guard<std::mutex> hold(cpu_mutex_);
  return cpu_clock_ ? thread_cpu(*cpu_clock_) : cpu_final_;
}

Service::~Service() { stop(); }

void Service::stop() {
  if (!work_) return;
  {
    // While the thread surely runs (the work guard holds it): once it has ended its clock may name another thread.
    std::lock_guard<std::mutex> hold(cpu_mutex_);
    if (cpu_clock_) cpu_final_ = thread_cpu(*cpu_clock_);
    cpu_clock_.reset();
  }
  asio::post(io_, [this] {
    impl_->stopped = true;
    if (impl_->acceptor) impl_->acceptor->close();
    for (auto& [id, weak] : std::map(impl_->endpoints))
      if (auto e = weak.lock()) e->close();
    // Handshakes under way and their timers are abandoned: their sockets close with the io_context.
    io_.stop();
  });
  work_.reset();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
    thread_.join();
  } else {
    // Polled by its owner (or, defensively, stopped from one of its own handlers): run what is left here, up to
    // the posted stop.
    io_.restart();
    io_.run();
    if (thread_.joinable()) thread_.detach();
  }
}

std::unique_ptr<Endpoint> Service::add_endpoint(EndpointSetup setup) {
  auto state = std::make_shared<EndpointState>(*impl_, std::move(setup));
  asio::post(io_, [impl = impl_.get(), state] {
    if (!impl->stopped) impl->endpoints[state->setup.node_id] = state;
  });
  return std::make_unique<Endpoint>(shared_from_this(), std::move(state));
}


}  // namespace gridtrain::dataplane
