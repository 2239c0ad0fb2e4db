#include "actors/tls_scribe.hpp"

#include <caf/io/middleman.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/native_socket.hpp>
#include <caf/io/network/stream_impl.hpp>

#include <utility>

namespace gridtrain::actors {

namespace {

using caf::io::network::native_socket;
using caf::io::network::rw_state;

// What caf::io::network::stream_impl asks of a policy, over a TLS session. A call that would block moves 0 bytes
// and succeeds, as CAF's TCP policy does on EAGAIN (an "indeterminate" write would make CAF drop the buffer).
struct TlsPolicy {
  explicit TlsPolicy(std::unique_ptr<dataplane::TlsSession> session) : session(std::move(session)) {}

  rw_state read_some(std::size_t& result, native_socket, void* into, std::size_t bytes) {
    const dataplane::TlsIo io = session->read(into, bytes);
    result = io.bytes;
    return io.failed ? rw_state::failure : rw_state::success;
  }

  rw_state write_some(std::size_t& result, native_socket, const void* from, std::size_t bytes) {
    const dataplane::TlsIo io = session->write(from, bytes);
    result = io.bytes;
    return io.failed ? rw_state::failure : rw_state::success;
  }

  // Bytes TLS has decrypted already never make the socket readable again: read them before waiting.
  bool must_read_more(native_socket, std::size_t) { return session->pending() > 0; }

  std::unique_ptr<dataplane::TlsSession> session;
};

// caf::io::network::scribe_impl with the TLS policy in place of TCP's.
class TlsScribe : public caf::io::scribe {
 public:
  TlsScribe(caf::io::network::default_multiplexer& multiplexer, native_socket fd,
            std::unique_ptr<dataplane::TlsSession> session)
      : scribe(caf::io::network::conn_hdl_from_socket(fd)), stream_(multiplexer, fd, std::move(session)) {}

  void configure_read(caf::io::receive_policy::config config) override {
    stream_.configure_read(config);
    if (!launched_) {
      launched_ = true;
      stream_.start(this);
    }
  }
  void ack_writes(bool enable) override { stream_.ack_writes(enable); }
  std::vector<char>& wr_buf() override { return stream_.wr_buf(); }
  std::vector<char>& rd_buf() override { return stream_.rd_buf(); }
  void graceful_shutdown() override {
    stream_.graceful_shutdown();
    detach(&stream_.backend(), false);
  }
  void flush() override { stream_.flush(this); }
  std::string addr() const override {
    auto address = caf::io::network::remote_addr_of_fd(stream_.fd());
    return address ? *address : std::string();
  }
  std::uint16_t port() const override {
    auto port = caf::io::network::remote_port_of_fd(stream_.fd());
    return port ? *port : 0;
  }
  void add_to_loop() override { stream_.activate(this); }
  void remove_from_loop() override { stream_.passivate(); }

 private:
  bool launched_ = false;
  caf::io::network::stream_impl<TlsPolicy> stream_;
};

}  // namespace

caf::io::scribe_ptr make_tls_scribe(caf::actor_system& system, int fd,
                                    std::unique_ptr<dataplane::TlsSession> session) {
  auto& multiplexer = static_cast<caf::io::network::default_multiplexer&>(system.middleman().backend());
  return caf::make_counted<TlsScribe>(multiplexer, fd, std::move(session));
}

}  // namespace gridtrain::actors
