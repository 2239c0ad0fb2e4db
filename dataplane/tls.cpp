#include "dataplane/tls.hpp"

#include <signal.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <array>
#include <fstream>

#include "base/check.hpp"

namespace gridtrain::dataplane {

namespace {

// The confirmation the acceptor sends once it has checked the dialer's certificate.
constexpr unsigned char kConfirmation = 'G';

// OpenSSL's queued errors in words, oldest first; the queue is emptied.
std::string openssl_errors() {
  std::string text;
  while (const unsigned long e = ERR_get_error()) {
    std::array<char, 256> line{};
    ERR_error_string_n(e, line.data(), line.size());
    if (!text.empty()) text += "; ";
    const char* reason = ERR_reason_error_string(e);
    text += reason ? reason : line.data();
  }
  return text.empty() ? "no reason given" : text;
}

std::string name_of(const X509_NAME* name) {
  BIO* out = BIO_new(BIO_s_mem());
  X509_NAME_print_ex(out, name, 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  const long size = BIO_get_mem_data(out, &data);
  std::string text(data, static_cast<std::size_t>(size));
  BIO_free(out);
  return text;
}

bool readable(const std::string& path) { return std::ifstream(path).good(); }

// OpenSSL writes to its sockets with write(2), which raises SIGPIPE when the peer has closed: by default that kills
// the whole process, so a node would die whenever a TLS peer leaves or is killed mid-write. A process that runs TLS
// connections takes EPIPE as an error instead. A handler the embedding program installed is left alone.
void ignore_sigpipe_once() {
  static const bool done = [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
    return true;
  }();
  (void)done;
}

// A key file with a passphrase would make OpenSSL prompt on the terminal; a node must fail instead.
int no_passphrase(char*, int, int, void*) { return 0; }

}  // namespace

Result<std::shared_ptr<const TlsContext>> TlsContext::load(const TlsFiles& files) {
  auto error = [](const std::string& key, const std::string& file, std::string message) {
    return Error{.source = file, .key = key, .message = std::move(message)};
  };
  if (!readable(files.certificate))
    return error("cluster.tls_certificate", files.certificate, "cannot read the certificate file");
  if (!readable(files.key)) return error("cluster.tls_key", files.key, "cannot read the key file");
  if (!readable(files.ca)) return error("cluster.tls_ca", files.ca, "cannot read the CA file");

  ignore_sigpipe_once();
  ERR_clear_error();
  SSL_CTX* raw = SSL_CTX_new(TLS_method());
  if (raw == nullptr) precondition_violated("SSL_CTX_new failed: " + openssl_errors());
  std::shared_ptr<TlsContext> context(new TlsContext(raw));
  SSL_CTX_set_min_proto_version(raw, TLS1_3_VERSION);
  SSL_CTX_set_num_tickets(raw, 0);
  SSL_CTX_set_session_cache_mode(raw, SSL_SESS_CACHE_OFF);
  // A peer that closes without close_notify has closed: CAF ends its connections with a plain FIN.
  SSL_CTX_set_options(raw, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  // Writes may end after a record (the data plane's writer resumes where it stopped), from a buffer that moves.
  SSL_CTX_set_mode(raw, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_default_passwd_cb(raw, no_passphrase);

  if (SSL_CTX_use_certificate_chain_file(raw, files.certificate.c_str()) != 1)
    return error("cluster.tls_certificate", files.certificate, "not a PEM certificate: " + openssl_errors());
  if (SSL_CTX_use_PrivateKey_file(raw, files.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    // OpenSSL checks the key against the certificate as it loads it.
    const bool mismatch = ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH;
    return error("cluster.tls_key", files.key,
                 (mismatch ? "the key does not belong to the certificate " + files.certificate + ": "
                           : std::string("not an unencrypted PEM private key: ")) +
                     openssl_errors());
  }
  if (SSL_CTX_check_private_key(raw) != 1)
    return error("cluster.tls_key", files.key,
                 "the key does not belong to the certificate " + files.certificate + ": " + openssl_errors());
  if (SSL_CTX_load_verify_locations(raw, files.ca.c_str(), nullptr) != 1)
    return error("cluster.tls_ca", files.ca, "not a PEM CA certificate: " + openssl_errors());

  // Our own certificate must pass the check every peer will make of it; better said now than by every peer.
  X509* own = SSL_CTX_get0_certificate(raw);
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(raw, &chain);
  X509_STORE_CTX* verify = X509_STORE_CTX_new();
  X509_STORE_CTX_init(verify, SSL_CTX_get_cert_store(raw), own, chain);
  const bool signed_by_ca = X509_verify_cert(verify) == 1;
  const int why = X509_STORE_CTX_get_error(verify);
  X509_STORE_CTX_free(verify);
  if (!signed_by_ca)
    return error("cluster.tls_certificate", files.certificate,
                 std::string("the certificate does not pass the check against cluster.tls_ca (") + files.ca +
                     "): " + X509_verify_cert_error_string(why));
  ERR_clear_error();
  context->subject_ = name_of(X509_get_subject_name(own));
  SSL_CTX_set_verify(raw, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return std::shared_ptr<const TlsContext>(std::move(context));
}

TlsContext::~TlsContext() { SSL_CTX_free(context_); }

TlsSession::TlsSession(const TlsContext& context, int fd, TlsRole role)
    : ssl_(SSL_new(context.native())), role_(role) {
  if (ssl_ == nullptr) precondition_violated("SSL_new failed");
  SSL_set_fd(ssl_, fd);
  if (role == TlsRole::dialer)
    SSL_set_connect_state(ssl_);
  else
    SSL_set_accept_state(ssl_);
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

TlsIo TlsSession::fail_with(int result, const char* during) {
  const int code = SSL_get_error(ssl_, result);
  if (code == SSL_ERROR_WANT_READ) return {.want = TlsWant::read};
  if (code == SSL_ERROR_WANT_WRITE) return {.want = TlsWant::write};
  phase_ = Phase::failed;
  const unsigned long first = ERR_peek_error();
  const bool alert = first != 0 && ERR_GET_LIB(first) == ERR_LIB_SSL && ERR_GET_REASON(first) >= SSL_AD_REASON_OFFSET;
  if (code == SSL_ERROR_ZERO_RETURN || (code == SSL_ERROR_SYSCALL && first == 0)) {
    error_ = "the peer closed the connection";
    ERR_clear_error();
  } else if (const long verified = SSL_get_verify_result(ssl_); verified != X509_V_OK) {
    refused_peer_ = true;
    error_ = std::string("its certificate does not pass the check against our cluster CA: ") +
             X509_verify_cert_error_string(verified);
    ERR_clear_error();
  } else if (alert) {
    refused_by_peer_ = true;
    error_ = "it refused our certificate (" + openssl_errors() + ")";
  } else {
    error_ = std::string("TLS failed during ") + during + ": " + openssl_errors();
  }
  return {.failed = true};
}

TlsIo TlsSession::handshake() {
  if (phase_ == Phase::failed) return {.failed = true};
  if (phase_ == Phase::tls) {
    ERR_clear_error();
    const int done = SSL_do_handshake(ssl_);
    if (done != 1) return fail_with(done, "the handshake");
    phase_ = Phase::confirm;
  }
  if (phase_ == Phase::confirm) {
    ERR_clear_error();
    unsigned char byte = kConfirmation;
    std::size_t moved = 0;
    const int ok = role_ == TlsRole::acceptor ? SSL_write_ex(ssl_, &byte, 1, &moved) : SSL_read_ex(ssl_, &byte, 1, &moved);
    if (ok != 1) return fail_with(ok, "the confirmation");
    if (byte != kConfirmation) {
      phase_ = Phase::failed;
      error_ = "the acceptor's first byte after the TLS handshake is not its confirmation";
      return {.failed = true};
    }
    phase_ = Phase::established;
  }
  return {};
}

TlsIo TlsSession::read(void* into, std::size_t bytes) {
  if (phase_ == Phase::tls || phase_ == Phase::confirm) precondition_violated("TlsSession I/O before the handshake");
  if (phase_ == Phase::failed) return {.failed = true};
  ERR_clear_error();
  std::size_t moved = 0;
  const int ok = SSL_read_ex(ssl_, into, bytes, &moved);
  if (ok != 1) return fail_with(ok, "a read");
  return {.bytes = moved};
}

TlsIo TlsSession::write(const void* from, std::size_t bytes) {
  if (phase_ == Phase::tls || phase_ == Phase::confirm) precondition_violated("TlsSession I/O before the handshake");
  if (phase_ == Phase::failed) return {.failed = true};
  ERR_clear_error();
  std::size_t moved = 0;
  const int ok = SSL_write_ex(ssl_, from, bytes, &moved);
  if (ok != 1) return fail_with(ok, "a write");
  return {.bytes = moved};
}

std::size_t TlsSession::pending() const { return static_cast<std::size_t>(SSL_pending(ssl_)); }

}  // namespace gridtrain::dataplane
