#pragma once
// The gate: the only way into a node's CAF port.
//
// CAF 0.17's BASP parser cannot be trusted with hostile bytes: 64 copies of the 8-byte integer 2^40 sent to a
// node's port made libcaf_io 0.17.6 dereference a null pointer on its multiplexer thread, before any check of
// ours could run, and Debian ships no other CAF. So CAF opens no port of its own. The gate listens on
// cluster.listen; a connection first runs the data plane's token handshake as channel `control`
// (dataplane/handshake.hpp: each side proves the cluster token over the other's fresh nonce, in fixed-size
// messages), and only a connection that passed it is handed to CAF's BASP broker, as CAF's own acceptor would
// hand it. A stranger's bytes reach only the handshake decoder, which reads fixed sizes and checks a magic, a
// protocol number and a MAC. Dialing is the same in reverse: gate_middleman()'s connect runs the handshake before
// CAF's, so a node never feeds its own parser from a peer that did not prove the token either.
//
// Without a token (cluster.token_file ""), the handshake still proves that both sides speak it (the MAC is keyed
// with the empty token): random bytes stop at the gate, but anyone who runs gridnode may join, as before.
//
// With TLS (cluster.tls_*), both sides run TLS (dataplane/tls.hpp) once the token handshake is through, and CAF
// gets the connection as a TLS scribe (actors/tls_scribe.hpp): every byte of BASP is encrypted, and a peer whose
// certificate the cluster CA did not sign never reaches CAF. A dialer refused for its certificate, or for using TLS
// where the gate does not (or the reverse), gets a gate error that says which.
//
//   auto gate = Gate::open(system, config.cluster.listen, credentials, node_actor);   // listens
//   request(gate_middleman(system, credentials), timeout, caf::connect_atom::value, host, port)  // dials

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/actor_system.hpp>
#include <caf/io/middleman_actor.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "actors/credentials.hpp"
#include "actors/reports.hpp"
#include "base/result.hpp"
#include "config/host_port.hpp"

namespace gridtrain::actors {

// What the gate turned away, and what it let in; read from any thread.
struct GateCounters {
  std::atomic<std::uint64_t> accepted{0};        // handed to CAF
  std::atomic<std::uint64_t> not_handshake{0};   // the first bytes were not a gate handshake (wrong magic)
  std::atomic<std::uint64_t> wrong_protocol{0};  // a handshake of another channel or version
  std::atomic<std::uint64_t> bad_proof{0};       // the dialer does not hold the cluster token
  std::atomic<std::uint64_t> timed_out{0};       // closed before the handshake was through, or too slow
  std::atomic<std::uint64_t> overflow{0};        // answered busy: kGateMaxPending handshakes were under way
  std::atomic<std::uint64_t> busy_address{0};    // answered busy: kGateMaxPendingPerAddress from that address
  std::atomic<std::uint64_t> tls_refused{0};     // TLS on one side only, or a certificate that fails the check

  GateStats snapshot() const;  // the counts now, as NodeStats carries them
};

// How long a dialer has to get through the handshake (connect, token, TLS), and how long the gate holds a
// connection for its token handshake: four messages of at most 72 bytes, two round trips (TLS then has
// kGateHandshakeTimeout more).
inline constexpr std::chrono::seconds kGateHandshakeTimeout{5};
inline constexpr std::chrono::seconds kGateAcceptTimeout{2};
// How many handshakes may be under way at once, in all and from one address (dataplane/admission.hpp): a flood
// of idle connections from one address holds at most kGateMaxPendingPerAddress sockets, each for at most
// kGateAcceptTimeout, and every other address still finds a place. A connection beyond either is answered busy.
inline constexpr std::size_t kGateMaxPending = 64;
inline constexpr std::size_t kGateMaxPendingPerAddress = 8;

class Gate {
 public:
  // Listens on `listen` (port 0: a free one) and hands each connection that proves the token (and passes TLS,
  // when `credentials` hold a TLS identity) to CAF, as a connection to `published`. The error names the address
  // when it cannot listen.
  static Result<std::unique_ptr<Gate>> open(caf::actor_system& system, const config::HostPort& listen,
                                            Credentials credentials, caf::actor published);
  ~Gate();  // stops accepting; connections already handed to CAF stay
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  std::uint16_t port() const;
  const GateCounters& counters() const;

  struct Impl;

 private:
  explicit Gate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Why a dial did not get through a gate, as a CAF error of category "gate" (SystemConfig renders it): a join
// tells a node that does not hold our token apart from one it cannot reach.
enum class GateRefusal : std::uint8_t {
  unreachable = 1,  // no connection, or it ended before the handshake was through
  wrong_token = 2,  // the node does not hold our cluster token (it refused our proof, or its own proof is wrong)
  not_a_gate = 3,   // what answered does not speak the handshake, or speaks another protocol
  tls = 4,          // TLS on one side only, or one side's certificate does not pass the other's check
  busy = 5,         // the gate has too many handshakes under way (from our address, or in all): try again later
  timed_out = 6,    // the connection or the gate's answer did not come in time: a loaded or stalled node, try again
};
inline constexpr caf::atom_value kGateErrorCategory = caf::atom("gate");
caf::error make_gate_error(GateRefusal refusal, std::string why);
// Whether `e` says that the node dialed is of another cluster: it does not hold our token, or TLS refused it or us.
// Another seed of the same cluster would answer the same.
bool is_refusal(const caf::error& e);
// Whether `e` says that the node dialed may let us in a moment later: its gate had no room for us (busy), or the
// dial or CAF's handshake after the gate did not finish in time (a node loaded by a flood of connections, or
// stalled). Refused connections and refusals are not: asking again would get the same answer.
bool may_let_in_later(const caf::error& e);
// "wrong cluster token: ..." and the like, for SystemConfig's renderer.
std::string render_gate_error(std::uint8_t code, const caf::message& context);

// The middleman actor through which this actor system's nodes with `credentials` dial: its connect
// (caf::connect_atom, host, port) passes the gate of the node it dials before CAF's own handshake; everything else
// it answers as CAF's middleman actor does. One per actor system and credentials, spawned at first use; it ends
// with the actor system's middleman. A gate that refuses us fails the request with a gate error (make_gate_error).
caf::io::middleman_actor gate_middleman(caf::actor_system& system, const Credentials& credentials);

}  // namespace gridtrain::actors
