// Links: one node's connection to one peer (dataplane/service_internals.hpp), over TCP (and TLS) or, for a peer
// in this process, memory: dialing and redialing, the queue of frames, the gathered writes and the reads that land
// frames straight in their rounds.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dataplane/service_internals.hpp"

namespace gridtrain::dataplane {

namespace {

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

}  // namespace

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
    asio::post(endpoint.service.io,
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

void Link::forget_stream() {
  // A frame half written or half read is lost with its connection; the rest wait for the next one.
  if (!queue.empty() && queue.front().sent > 0) {
    ++counters(queue.front().tag.dim).frames_unsent;
    queue.pop_front();
  }
  in_header_got = 0;
  in_payload = false;
  paused = false;
  write_armed = read_armed = false;
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
  forget_stream();
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
  auto resolver = std::make_shared<tcp::resolver>(endpoint.service.io);
  resolver->async_resolve(
      parts.value().first, std::to_string(parts.value().second),
      [self = shared_from_this(), resolver, g = generation](std::error_code e, tcp::resolver::results_type results) {
        if (self->generation != g || self->state != State::connecting) return;
        if (e) return self->fail("cannot resolve its data address: " + e.message());
        auto s = std::make_shared<tcp::socket>(self->endpoint.service.io);
        // A firewall that drops the SYNs would hold the connect for the kernel's two minutes of retries.
        auto deadline = std::make_shared<asio::steady_timer>(self->endpoint.service.io);
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

void Link::start_handshake_as_dialer(tcp::socket s) {
  state = State::handshaking;
  start_dialer_handshake(shared_from_this(), std::move(s));
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
  forget_stream();
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
    asio::post(endpoint.service.io, [self = shared_from_this(), g = generation] {
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
  asio::post(endpoint.service.io, [self = shared_from_this(), g = generation] {
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

}  // namespace gridtrain::dataplane
