// Both halves of dataplane/handshake.hpp's protocol on Asio (dataplane/handshake_session.hpp): four fixed-size
// messages, each side's proof checked against its own fresh nonce, then TLS where the terms give a context.

#include "dataplane/handshake_session.hpp"

#include <utility>

#include "dataplane/tls_async.hpp"

namespace gridtrain::dataplane {

namespace {

using tcp = asio::ip::tcp;

std::string peer_of(const tcp::socket& socket) {
  std::error_code e;
  const auto at = socket.remote_endpoint(e);
  return e ? std::string("an unknown address") : at.address().to_string();
}

// What both halves hold: the socket and its deadline, TLS's session, and the four messages' bytes.
struct Session {
  explicit Session(tcp::socket s) : socket(std::move(s)), timer(socket.get_executor()) {}

  // Closes the socket `limit` from now unless the session ends first (replaces the limit before): whatever waits
  // on it ends, and `expired` says why.
  void close_after(std::shared_ptr<Session> self, std::chrono::steady_clock::duration limit) {
    timer.expires_after(limit);
    timer.async_wait([self = std::move(self)](std::error_code e) {
      if (e) return;
      self->expired = true;
      std::error_code ignored;
      self->socket.close(ignored);
    });
  }

  // Ends the deadline and gives the caller the socket (and TLS's session) where the handshake passed; else closes
  // it, and there is no session.
  std::pair<tcp::socket, std::unique_ptr<TlsSession>> hand_over(bool passed) {
    timer.cancel();
    if (!passed) {
      std::error_code ignored;
      socket.close(ignored);
      session.reset();
    }
    return {std::move(socket), std::move(session)};
  }

  tcp::socket socket;
  asio::steady_timer timer;
  bool expired = false;
  std::unique_ptr<TlsSession> session;
  std::array<std::byte, kHelloBytes> hello_bytes{};
  std::array<std::byte, kChallengeBytes> challenge_bytes{};
  std::array<std::byte, kProofBytes> proof_bytes{};
  std::array<std::byte, kVerdictBytes> verdict_bytes{};
};

// The dialer's half. Its deadline closes the socket, so that whatever waits on it ends, as timed out.
struct DialerSession : Session, std::enable_shared_from_this<DialerSession> {
  DialerSession(tcp::socket s, DialerTerms terms, std::function<void(Dialed)> done)
      : Session(std::move(s)), terms(std::move(terms)), done(std::move(done)) {}

  void run() {
    close_after(shared_from_this(), terms.timeout);
    terms.hello.nonce = make_nonce();
    encode(terms.hello, std::span<std::byte, kHelloBytes>(hello_bytes));
    // A gate with no room for us answers busy and closes without reading our hello: its answer may be there even
    // where our hello could not go, so the challenge is read either way.
    asio::async_write(socket, asio::buffer(hello_bytes), [self = shared_from_this()](std::error_code, std::size_t) {
      asio::async_read(self->socket, asio::buffer(self->challenge_bytes),
                       [self](std::error_code e, std::size_t) { self->on_challenge(e); });
    });
  }

  void on_challenge(std::error_code e) {
    if (e && expired)
      return finish(DialEnd::timed_out, Refusal::none,
                    "did not answer the " + terms.name +
                        " (not a gridtrain node, or one of another version, or one stalled or loaded)");
    if (e)
      return finish(DialEnd::no_answer, Refusal::none,
                    "did not answer the " + terms.name + " (not a gridtrain node, or one of another version)");
    auto challenge = decode_challenge(challenge_bytes);
    if (!challenge)
      return finish(DialEnd::no_answer, Refusal::none,
                    "answered the " + terms.name + " with something else: " + challenge.error().message);
    if (challenge.value().refusal != Refusal::none)
      return finish(DialEnd::refused, challenge.value().refusal, "refused us: " + to_string(challenge.value().refusal));
    const Hello& h = terms.hello;
    acceptor_proved =
        equal_macs(challenge.value().mac, acceptor_mac(terms.mac, h.nonce, h.from_node, h.to_node, terms.channel));
    encode(Proof{dialer_mac(terms.mac, challenge.value().nonce, h.from_node, h.to_node, terms.channel)},
           std::span<std::byte, kProofBytes>(proof_bytes));
    asio::async_write(socket, asio::buffer(proof_bytes), [self = shared_from_this()](std::error_code e, std::size_t) {
      if (e) return self->lost();
      asio::async_read(self->socket, asio::buffer(self->verdict_bytes),
                       [self](std::error_code e, std::size_t) { self->on_verdict(e); });
    });
  }

  void on_verdict(std::error_code e) {
    // A node that does not hold our token is not trusted with a byte more, whatever it answers.
    if (!acceptor_proved) return finish(DialEnd::wrong_token, Refusal::none, "does not hold our cluster token");
    if (e) return lost();
    auto verdict = decode_verdict(verdict_bytes);
    if (!verdict)
      return finish(DialEnd::no_answer, Refusal::none,
                    "answered the " + terms.name + " with something else: " + verdict.error().message);
    if (verdict.value().refusal == Refusal::bad_proof)
      return finish(DialEnd::bad_proof, Refusal::bad_proof, "refused our cluster token");
    if (verdict.value().refusal != Refusal::none)
      return finish(DialEnd::refused, verdict.value().refusal, "refused us: " + to_string(verdict.value().refusal));
    if (!terms.tls) return finish(DialEnd::passed, Refusal::none, "");
    std::error_code ignored;
    socket.non_blocking(true, ignored);
    session = std::make_unique<TlsSession>(*terms.tls, socket.native_handle(), TlsRole::dialer);
    async_tls_handshake(socket, *session, [self = shared_from_this()](bool ok) {
      if (ok) return self->finish(DialEnd::passed, Refusal::none, "");
      if (self->expired) return self->finish(DialEnd::timed_out, Refusal::none, "did not finish TLS in time");
      const std::string& why = self->session->error();
      self->finish(DialEnd::tls_failed, Refusal::none, "TLS: " + (why.empty() ? std::string("closed") : why));
    });
  }

  // The socket failed or closed after the challenge: the deadline's doing, or the peer's.
  void lost() {
    if (expired) return finish(DialEnd::timed_out, Refusal::none, "did not finish the " + terms.name + " in time");
    finish(DialEnd::closed, Refusal::none, "closed the connection during the " + terms.name);
  }

  void finish(DialEnd end, Refusal refusal, std::string why) {
    auto [out, tls] = hand_over(end == DialEnd::passed);
    auto call = std::move(done);
    call(Dialed{.end = end,
                .refusal = refusal,
                .why = std::move(why),
                .socket = std::move(out),
                .session = std::move(tls)});
  }

  DialerTerms terms;
  std::function<void(Dialed)> done;
  bool acceptor_proved = false;
};

// The acceptor's half. Its deadline closes the socket; a stranger gets no answer to what is not a hello.
struct AcceptorSession : Session, std::enable_shared_from_this<AcceptorSession> {
  AcceptorSession(tcp::socket s, Admission::Ticket ticket, AcceptorTerms terms, std::function<void(Accepted)> done)
      : Session(std::move(s)), ticket(std::move(ticket)), terms(std::move(terms)), done(std::move(done)) {}

  void run() {
    close_after(shared_from_this(), terms.hello_timeout);
    asio::async_read(socket, asio::buffer(hello_bytes),
                     [self = shared_from_this()](std::error_code e, std::size_t) { self->on_hello(e); });
  }

  void on_hello(std::error_code e) {
    if (e) return finish(AcceptEnd::silent);  // silent past the deadline, or gone
    auto decoded = decode_hello(hello_bytes);
    if (!decoded) return finish(AcceptEnd::not_handshake);  // not ours: a stranger gets no answer
    hello = decoded.value();
    const bool dialer_tls = (hello.protocol & kTlsFlag) != 0;
    Challenge challenge;
    if ((hello.protocol & ~kTlsFlag) != terms.protocol) {
      challenge.refusal = Refusal::protocol;
    } else if (dialer_tls != (terms.tls != nullptr)) {
      challenge.refusal = Refusal::tls_mismatch;
    } else {
      HelloAnswer answer = terms.answer(hello);
      challenge.refusal = answer.refusal;
      mac = std::move(answer.mac);
    }
    refusal = challenge.refusal;
    if (refusal == Refusal::none) {
      challenge.nonce = nonce = make_nonce();
      challenge.mac = acceptor_mac(mac, hello.nonce, hello.from_node, hello.to_node, terms.channel);
    }
    encode(challenge, std::span<std::byte, kChallengeBytes>(challenge_bytes));
    asio::async_write(socket, asio::buffer(challenge_bytes), [self = shared_from_this()](std::error_code e,
                                                                                         std::size_t) {
      if (self->refusal != Refusal::none) return self->finish(AcceptEnd::refused);
      if (e) return self->finish(AcceptEnd::gone);
      asio::async_read(self->socket, asio::buffer(self->proof_bytes),
                       [self](std::error_code e, std::size_t) { self->on_proof(e); });
    });
  }

  void on_proof(std::error_code e) {
    if (e) return finish(AcceptEnd::gone);
    auto proof = decode_proof(proof_bytes);
    const bool proved =
        proof && equal_macs(proof.value().mac, dialer_mac(mac, nonce, hello.from_node, hello.to_node, terms.channel));
    Verdict verdict;
    if (!proved) verdict.refusal = Refusal::bad_proof;
    encode(verdict, std::span<std::byte, kVerdictBytes>(verdict_bytes));
    asio::async_write(socket, asio::buffer(verdict_bytes), [self = shared_from_this(), proved](std::error_code e,
                                                                                               std::size_t) {
      if (!proved) return self->finish(AcceptEnd::bad_proof);
      if (e) return self->finish(AcceptEnd::gone);
      if (!self->terms.tls) return self->finish(AcceptEnd::passed);
      self->start_tls();
    });
  }

  void start_tls() {
    std::error_code ignored;
    socket.non_blocking(true, ignored);
    close_after(shared_from_this(), terms.tls_timeout);  // TLS's round trips and certificates, after the token's
    session = std::make_unique<TlsSession>(*terms.tls, socket.native_handle(), TlsRole::acceptor);
    async_tls_handshake(socket, *session, [self = shared_from_this()](bool ok) {
      if (ok) return self->finish(AcceptEnd::passed);
      // "" only for the deadline: a dialer that closed during TLS is a TLS failure too.
      const std::string& why = self->session->error();
      self->finish(AcceptEnd::tls_failed,
                   self->expired ? std::string() : why.empty() ? std::string("the dialer closed the connection") : why);
    });
  }

  void finish(AcceptEnd end, std::string tls_error = {}) {
    // The dialer's address, for the caller's log line about a refusal (read while the socket is open).
    std::string peer = end == AcceptEnd::passed ? std::string() : peer_of(socket);
    auto [out, tls] = hand_over(end == AcceptEnd::passed);
    auto call = std::move(done);
    call(Accepted{.end = end,
                  .hello = hello,
                  .refusal = refusal,
                  .tls_error = std::move(tls_error),
                  .peer = std::move(peer),
                  .socket = std::move(out),
                  .session = std::move(tls)});
  }

  Admission::Ticket ticket;  // its place among the handshakes under way, freed with the session
  AcceptorTerms terms;
  std::function<void(Accepted)> done;
  Hello hello;
  Refusal refusal = Refusal::none;
  MacFunction mac;
  Nonce nonce{};
};

}  // namespace

void run_dialer_handshake(tcp::socket socket, DialerTerms terms, std::function<void(Dialed)> done) {
  std::make_shared<DialerSession>(std::move(socket), std::move(terms), std::move(done))->run();
}

void run_acceptor_handshake(tcp::socket socket, Admission::Ticket ticket, AcceptorTerms terms,
                            std::function<void(Accepted)> done) {
  std::make_shared<AcceptorSession>(std::move(socket), std::move(ticket), std::move(terms), std::move(done))->run();
}

}  // namespace gridtrain::dataplane
