// The handshakes that open the data plane's links, both halves of dataplane/handshake.hpp's protocol on Asio, each
// with its deadline: the dialer's proves the cluster token and opens its link; the acceptor's finds the endpoint
// asked for, checks the proof and attaches the connection to it. TLS follows the token where the service runs it.

#include <spdlog/spdlog.h>

#include "dataplane/service_internals.hpp"

namespace gridtrain::dataplane {

namespace {

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

}  // namespace

void start_dialer_handshake(std::shared_ptr<Link> link, tcp::socket socket) {
  std::make_shared<DialerHandshake>(std::move(link), std::move(socket))->run();
}

void start_acceptor_handshake(Service::Impl& service, tcp::socket socket, Admission::Ticket ticket) {
  std::make_shared<AcceptorHandshake>(service, std::move(socket), std::move(ticket))->run();
}

}  // namespace gridtrain::dataplane
