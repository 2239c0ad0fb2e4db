#pragma once
// TLS's handshake (dataplane/tls.hpp) driven on an Asio socket, for the data plane's handshakes and the gate's.

#include <asio.hpp>

#include "dataplane/tls.hpp"

namespace gridtrain::dataplane {

// Runs session.handshake() to its end on the socket's executor, waiting for the socket as it asks: done(true) once
// established, done(false) if it failed (session.error() says why; "" when the socket was closed meanwhile, as a
// timeout does). `done` keeps the socket and the session alive (it holds their owner).
template <class Done>
void async_tls_handshake(asio::ip::tcp::socket& socket, TlsSession& session, Done done) {
  const TlsIo io = session.handshake();
  if (io.failed) return done(false);
  if (io.want == TlsWant::nothing) return done(true);
  socket.async_wait(io.want == TlsWant::read ? asio::ip::tcp::socket::wait_read : asio::ip::tcp::socket::wait_write,
                    [&socket, &session, done = std::move(done)](std::error_code e) mutable {
                      if (e) return done(false);
                      async_tls_handshake(socket, session, std::move(done));
                    });
}

}  // namespace gridtrain::dataplane
