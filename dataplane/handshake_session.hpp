#pragma once
// Both halves of dataplane/handshake.hpp's protocol on an Asio socket, each with its deadline, and TLS after the
// token where a TLS context is given: the one implementation that the data plane's links (handshake of channel
// `data`) and the gate in front of CAF's port (actors/gate.cpp, channel `control`) drive. What differs between
// them is given as terms: the channel, the MAC, who the dialer is, and, for an acceptor, what it makes of a hello
// (another protocol, a node it does not host). What each does with the outcome (count it, log it, open a link,
// hand the socket to CAF) is the caller's.
//
//   run_dialer_handshake(std::move(connected), DialerTerms{...}, [](Dialed d) { ... });
//   run_acceptor_handshake(std::move(accepted), std::move(ticket), AcceptorTerms{...}, [](Accepted a) { ... });
//
// Each calls `done` exactly once, on the socket's executor, unless that executor stops first (then the session
// is destroyed with it, its socket closed, and `done` never called).

#include <asio.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "dataplane/admission.hpp"
#include "dataplane/handshake.hpp"
#include "dataplane/tls.hpp"

namespace gridtrain::dataplane {

// How a dialer's handshake ended.
enum class DialEnd {
  passed,       // both proofs checked (and TLS established): the socket is the caller's
  refused,      // the acceptor refused us in its challenge (`refusal`: busy, protocol, tls_mismatch, unknown_node)
  wrong_token,  // the acceptor's proof is wrong: it does not hold our token (our proof went out all the same, so
                // that its side counts and logs a wrong token rather than a dialer that went quiet)
  bad_proof,    // the acceptor refused our proof: we do not hold its token
  no_answer,    // it closed before its challenge, or answered something that is not this handshake
  closed,       // it closed after its challenge, before its verdict or during TLS
  timed_out,    // the deadline passed first: a stalled or loaded node, or a port that accepts and never speaks
  tls_failed,   // TLS after the token: `why` says which side refused what
};

struct Dialed {
  DialEnd end = DialEnd::no_answer;
  Refusal refusal = Refusal::none;  // for `refused` and `bad_proof`
  std::string why;                  // for every end but `passed`: what the node dialed did, to follow its name
  asio::ip::tcp::socket socket;     // for `passed`; closed otherwise
  std::unique_ptr<TlsSession> session;  // for `passed` where TLS runs
};

struct DialerTerms {
  Hello hello;  // sent as it is (its nonce is made here)
  MacFunction mac;
  Channel channel = Channel::data;
  std::shared_ptr<const TlsContext> tls;  // TLS after the token; its flag must be set in hello.protocol
  std::chrono::steady_clock::duration timeout{};  // for all of it, TLS included
  std::string name = "handshake";  // what `why` calls it ("gate handshake")
};

// Runs the dialer's half over a connected socket.
void run_dialer_handshake(asio::ip::tcp::socket socket, DialerTerms terms, std::function<void(Dialed)> done);

// What an acceptor makes of a dialer's hello: refuse it (and the challenge says why), or go on with `mac`.
struct HelloAnswer {
  Refusal refusal = Refusal::none;
  MacFunction mac;  // where `refusal` is none
};

// How an acceptor's handshake ended.
enum class AcceptEnd {
  passed,         // the dialer proved the token (and TLS is established): the socket is the caller's
  silent,         // no hello: closed, or silent past the hello's deadline
  not_handshake,  // its first bytes are not a hello (no answer was sent)
  refused,        // answered with `refusal` (the terms' answer)
  bad_proof,      // its proof is wrong: it does not hold the token
  gone,           // closed or silent after our challenge
  tls_failed,     // TLS failed or timed out: `tls_error` ("" for a timeout)
};

struct Accepted {
  AcceptEnd end = AcceptEnd::silent;
  Hello hello;                      // from `refused` on
  Refusal refusal = Refusal::none;  // for `refused`
  std::string tls_error;            // for `tls_failed`; "" where its deadline passed
  std::string peer;                 // the dialer's address, for a log line ("" for `passed`)
  asio::ip::tcp::socket socket;     // for `passed`; closed otherwise
  std::unique_ptr<TlsSession> session;  // for `passed` where TLS runs
};

struct AcceptorTerms {
  Channel channel = Channel::data;
  std::shared_ptr<const TlsContext> tls;  // TLS after the token; a dialer that differs is refused as tls_mismatch
  std::uint32_t protocol = kDataProtocol;  // a hello of another is refused as `protocol`
  std::chrono::steady_clock::duration hello_timeout{};  // for the token's messages
  std::chrono::steady_clock::duration tls_timeout{};    // for TLS's, after them
  // Called with a hello of our protocol and TLS setting; its refusal goes out in the challenge.
  std::function<HelloAnswer(const Hello&)> answer;
};

// Runs the acceptor's half over an accepted socket, holding its admission ticket until it ends.
void run_acceptor_handshake(asio::ip::tcp::socket socket, Admission::Ticket ticket, AcceptorTerms terms,
                            std::function<void(Accepted)> done);

}  // namespace gridtrain::dataplane
