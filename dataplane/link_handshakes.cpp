// The data plane's use of the handshake (dataplane/handshake_session.hpp), as channel `data`: a link's dialer
// proves the cluster token and opens its link; an accepted connection is asked which endpoint it wants, and,
// proved, attached to it. What each refusal counts and logs.

#include <spdlog/spdlog.h>

#include <string>
#include <string_view>

#include "dataplane/handshake_session.hpp"
#include "dataplane/service_internals.hpp"

namespace gridtrain::dataplane {

void start_dialer_handshake(std::shared_ptr<Link> link, tcp::socket socket) {
  const auto& setup = link->endpoint.setup;
  const auto& tls = link->endpoint.service.service.options().tls;
  DialerTerms terms{.hello = Hello{kDataProtocol | (tls ? kTlsFlag : 0u), setup.node_id, link->peer, link->stream,
                                   link->endpoint.service.service.options().streams, Nonce{}},
                    .mac = setup.mac,
                    .channel = Channel::data,
                    .tls = tls,
                    .timeout = kHandshakeTimeout};
  run_dialer_handshake(std::move(socket), std::move(terms), [link](Dialed d) {
    if (d.end == DialEnd::passed) return link->open_with(std::move(d.socket), std::move(d.session));
    // A peer of another token or TLS setting is counted; a busy or silent one is only redialled.
    const bool refused_us = d.end == DialEnd::wrong_token || d.end == DialEnd::bad_proof ||
                            d.end == DialEnd::tls_failed ||
                            (d.end == DialEnd::refused && d.refusal == Refusal::tls_mismatch);
    if (refused_us) ++link->endpoint.refused.handshakes;
    link->fail(d.why);
  });
}

void start_acceptor_handshake(Service::Impl& service, tcp::socket socket, Admission::Ticket ticket) {
  // A dialer `to` refused for `why`: counted, and logged once per pair of nodes and kind (`what`).
  auto refuse = [&service](EndpointState& to, const Hello& hello, std::string_view what, const std::string& why) {
    ++to.refused.handshakes;
    if (service.first_time(what, hello.to_node, hello.from_node))
      spdlog::warn("data plane: node {:016x}: refused a connection from node {:016x}: {} (said once per peer)",
                   hello.to_node, hello.from_node, why);
  };
  // The endpoint the dialer asked for, found when its hello comes.
  auto endpoint = std::make_shared<std::shared_ptr<EndpointState>>();
  AcceptorTerms terms{.channel = Channel::data,
                      .tls = service.service.options().tls,
                      .protocol = kDataProtocol,
                      .hello_timeout = kAcceptTimeout,
                      .tls_timeout = kHandshakeTimeout,
                      .answer = [&service, endpoint](const Hello& hello) -> HelloAnswer {
                        if (hello.streams < 1 || hello.streams > kMaxStreams || hello.stream >= hello.streams)
                          return {.refusal = Refusal::protocol, .mac = {}};
                        *endpoint = service.endpoint(hello.to_node);
                        if (!*endpoint) return {.refusal = Refusal::unknown_node, .mac = {}};
                        return {.refusal = Refusal::none, .mac = (*endpoint)->setup.mac};
                      }};
  auto done = [&service, endpoint, refuse](Accepted a) {
    // (Found by the hello from `passed` on; a refusal for TLS comes before the hello is asked about.)
    const std::shared_ptr<EndpointState> to =
        a.end == AcceptEnd::refused && a.refusal == Refusal::tls_mismatch ? service.endpoint(a.hello.to_node)
                                                                          : *endpoint;
    if (!to) {
      if (a.end != AcceptEnd::gone) service.count_stranger();
      return;
    }
    switch (a.end) {
      case AcceptEnd::passed:
        if (!to->closed) to->attach_inbound(a.hello, std::move(a.socket), std::move(a.session));
        return;
      case AcceptEnd::refused:
        if (a.refusal == Refusal::tls_mismatch)
          ++to->refused.handshakes;
        else
          service.count_stranger();
        return;
      case AcceptEnd::bad_proof:
        return refuse(*to, a.hello, "bad proof", "it does not hold the cluster token");
      case AcceptEnd::tls_failed:
        return refuse(*to, a.hello, "tls", "TLS: " + (a.tls_error.empty() ? std::string("timed out") : a.tls_error));
      case AcceptEnd::silent:
      case AcceptEnd::not_handshake:
        service.count_stranger();
        return;
      case AcceptEnd::gone:
        return;
    }
  };
  run_acceptor_handshake(std::move(socket), std::move(ticket), std::move(terms), std::move(done));
}

}  // namespace gridtrain::dataplane
