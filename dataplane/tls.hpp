#pragma once
// TLS between nodes (cluster.tls_certificate, tls_key, tls_ca): the data plane's links and the gate's control
// connections run it after the token handshake (dataplane/handshake.hpp), on the same socket.
//
// Decisions:
// - Mutual authentication by one cluster CA: each side presents its certificate and checks the other's against
//   the CA. No host name is checked: a cluster is the set of holders of the CA's certificates (nodes of an Auto
//   Scaling group have no stable names), so the CA must sign nothing else. The token still proves membership too.
// - TLS 1.3 only, no session tickets, no renegotiation: nothing is written after the handshake but what the
//   caller writes.
// - The token handshake runs first, in the clear (it reveals nothing: each side MACs the other's nonce), so a
//   stranger's bytes reach only its fixed-size decoder and cannot make a node do a TLS handshake's work.
// - TLS 1.3 lets the dialer finish its handshake before the acceptor has checked the dialer's certificate, so
//   the acceptor sends one confirmation byte once it has: the dialer knows, before it sends anything, whether the
//   acceptor took its certificate, and a refused node can say why ("it refused our certificate: unknown ca").
//
//   auto tls = TlsContext::load({cert, key, ca}).value();
//   TlsSession session(*tls, fd, TlsRole::dialer);        // on a connected non-blocking socket
//   while ((io = session.handshake()).want != TlsWant::nothing) wait for io.want ...;
//   session.write(bytes, n); session.read(into, n);

#include <openssl/types.h>

#include <cstddef>
#include <memory>
#include <string>

#include "base/result.hpp"

namespace gridtrain::dataplane {

// The paths of a node's TLS identity, as the config names them.
struct TlsFiles {
  std::string certificate;  // PEM: the node's certificate (and any intermediates after it)
  std::string key;          // PEM: its private key, not encrypted
  std::string ca;           // PEM: the cluster CA's certificate
};

// A node's TLS identity and trust, loaded and checked once. Shared by every connection of the node.
class TlsContext {
 public:
  // Errors name the config key and the file: unreadable or not PEM, a key that does not belong to the certificate,
  // an encrypted key, a certificate the CA did not sign (every peer would refuse it), an expired one.
  static Result<std::shared_ptr<const TlsContext>> load(const TlsFiles& files);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  SSL_CTX* native() const { return context_; }
  // The subject of our own certificate, for logs ("CN=node-3").
  const std::string& subject() const { return subject_; }

 private:
  explicit TlsContext(SSL_CTX* context) : context_(context) {}
  SSL_CTX* context_;
  std::string subject_;
};

enum class TlsRole : std::uint8_t { dialer, acceptor };
// What a non-blocking call waits for before it can go on.
enum class TlsWant : std::uint8_t { nothing, read, write };

struct TlsIo {
  std::size_t bytes = 0;              // moved by read() or write()
  TlsWant want = TlsWant::nothing;    // nothing and !failed: done (handshake) or bytes moved
  bool failed = false;                // the connection is over; error() says why
};

// One connection's TLS session over a connected, non-blocking socket that it does not own (it never closes it).
class TlsSession {
 public:
  TlsSession(const TlsContext& context, int fd, TlsRole role);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Runs the handshake and the confirmation byte as far as the socket allows. Call again when `want` is ready.
  TlsIo handshake();
  bool established() const { return phase_ == Phase::established; }
  // After the handshake. read(): bytes > 0, or want, or failed (the peer closed: error() is "the peer closed the
  // connection"). write(): takes at most one TLS record's worth per call.
  TlsIo read(void* into, std::size_t bytes);
  TlsIo write(const void* from, std::size_t bytes);
  // Bytes decrypted and not read yet: a reader must read them before it waits for the socket again.
  std::size_t pending() const;
  // Why the handshake or the connection failed, in words for a log line or an error message.
  const std::string& error() const { return error_; }
  // Whether the failure was the peer refusing our certificate (rather than ours refusing its, or the network).
  bool refused_by_peer() const { return refused_by_peer_; }
  // Whether the failure was our side refusing the peer's certificate.
  bool refused_peer() const { return refused_peer_; }

 private:
  enum class Phase : std::uint8_t { tls, confirm, established, failed };
  TlsIo fail_with(int result, const char* during);

  SSL* ssl_;
  TlsRole role_;
  Phase phase_ = Phase::tls;
  std::string error_;
  bool refused_by_peer_ = false;
  bool refused_peer_ = false;
};

}  // namespace gridtrain::dataplane
