#include "actors/gate.hpp"

#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <netdb.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <asio.hpp>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include "actors/tls_scribe.hpp"
#include "actors/token_proof.hpp"
#include "dataplane/admission.hpp"
#include "dataplane/handshake.hpp"
#include "dataplane/tls_async.hpp"

namespace gridtrain::actors {

namespace {

using tcp = asio::ip::tcp;
using dataplane::Challenge;
using dataplane::Channel;
using dataplane::Hello;
using dataplane::Mac;
using dataplane::MacFunction;
using dataplane::Nonce;
using dataplane::Proof;
using dataplane::Refusal;
using dataplane::TlsRole;
using dataplane::TlsSession;
using dataplane::TlsWant;
using dataplane::Verdict;

MacFunction mac_of(std::string token) {
  return [token = std::move(token)](std::span<const std::byte> message) { return token_mac(token, message); };
}

// The acceptor's side of one connection's handshake, on the gate's thread.
struct Handshake : std::enable_shared_from_this<Handshake> {
  Handshake(Gate::Impl& gate, tcp::socket s, dataplane::Admission::Ticket ticket);

  void run();
  // Ends the handshake, timed out, unless it is through within `limit` from now (replaces the limit before).
  void end_after(std::chrono::steady_clock::duration limit);
  void on_hello(std::error_code e);
  void on_proof(std::error_code e);
  void start_tls();
  void end(std::atomic<std::uint64_t>* counter);

  Gate::Impl& gate;
  tcp::socket socket;
  asio::steady_timer timer;
  // Its place among the handshakes under way: freed with it, even after the gate closed (a handshake still pending
  // then is destroyed with the io_context).
  dataplane::Admission::Ticket ticket;
  bool ended = false;
  std::unique_ptr<TlsSession> session;
  Hello hello;
  Nonce nonce{};
  std::array<std::byte, dataplane::kHelloBytes> hello_bytes{};
  std::array<std::byte, dataplane::kChallengeBytes> challenge_bytes{};
  std::array<std::byte, dataplane::kProofBytes> proof_bytes{};
  std::array<std::byte, dataplane::kVerdictBytes> verdict_bytes{};
};

}  // namespace

struct Gate::Impl {
  Impl(caf::actor_system& system, Credentials credentials, caf::actor published)
      : system(system),
        mac(mac_of(credentials.token)),
        tls(std::move(credentials.tls)),
        published(std::move(published)),
        acceptor(io) {}

  void accept() {
    acceptor.async_accept([this](std::error_code e, tcp::socket s) {
      if (e == asio::error::operation_aborted || stopped) return;
      if (!e) {
        std::error_code ignored;
        const std::string from = s.remote_endpoint(ignored).address().to_string();
        auto admitted = admission->admit(from);
        if (admitted.ticket) {
          std::make_shared<Handshake>(*this, std::move(s), std::move(*admitted.ticket))->run();
        } else {
          if (admitted.busy == dataplane::Admission::Busy::address) {
            ++counters.busy_address;
            log_refusal(from, "more than " + std::to_string(kGateMaxPendingPerAddress) +
                                  " handshakes at once from this address (answered busy)");
          } else {
            ++counters.overflow;
          }
          dataplane::answer_busy(s.native_handle());
          s.close(ignored);
        }
      }
      accept();
    });
  }

  // Says once per peer address why the gate turned it away (a scan or a flood logs a line per address, not per
  // connection); the set is bounded, after which nothing more is logged.
  void log_refusal(const std::string& peer, const std::string& why) {
    if (logged.size() >= 1024 || !logged.insert(peer).second) return;
    spdlog::warn("gate on port {}: refused a connection from {}: {} (said once per address)", port, peer, why);
  }

  // A connection that passed: CAF's BASP broker takes it as its own acceptor's, for `published`; through TLS
  // when the gate runs it.
  void hand_to_caf(tcp::socket socket, std::unique_ptr<TlsSession> session) {
    std::error_code e;
    const auto fd = socket.release(e);
    if (e) return;
    auto& mm = system.middleman();
    caf::io::scribe_ptr scribe =
        session ? make_tls_scribe(system, fd, std::move(session)) : mm.backend().new_scribe(fd);
    auto broker = mm.named_broker<caf::io::basp_broker>(caf::atom("BASP"));
    caf::anon_send(broker, caf::publish_atom::value, std::move(scribe), port,
                   caf::actor_cast<caf::strong_actor_ptr>(published), std::set<std::string>{});
    ++counters.accepted;
  }

  caf::actor_system& system;
  MacFunction mac;
  std::shared_ptr<const dataplane::TlsContext> tls;  // nullptr: no TLS
  caf::actor published;
  asio::io_context io;
  tcp::acceptor acceptor;
  std::uint16_t port = 0;
  // Handshakes under way, in all and per address (the gate's thread only); each holds its ticket, since those left
  // pending when the gate closes are destroyed with `io`.
  std::shared_ptr<dataplane::Admission> admission =
      std::make_shared<dataplane::Admission>(kGateMaxPending, kGateMaxPendingPerAddress);
  std::set<std::string> logged;
  bool stopped = false;
  GateCounters counters;
  std::thread thread;
};

namespace {

Handshake::Handshake(Gate::Impl& gate, tcp::socket s, dataplane::Admission::Ticket ticket)
    : gate(gate), socket(std::move(s)), timer(socket.get_executor()), ticket(std::move(ticket)) {}

std::string peer_of(const tcp::socket& socket) {
  std::error_code e;
  const auto at = socket.remote_endpoint(e);
  return e ? std::string("an unknown address") : at.address().to_string();
}

void Handshake::end_after(std::chrono::steady_clock::duration limit) {
  timer.expires_after(limit);
  timer.async_wait([self = shared_from_this()](std::error_code e) {
    if (!e) self->end(&self->gate.counters.timed_out);
  });
}

void Handshake::run() {
  end_after(kGateAcceptTimeout);
  asio::async_read(socket, asio::buffer(hello_bytes),
                   [self = shared_from_this()](std::error_code e, std::size_t) { self->on_hello(e); });
}

void Handshake::on_hello(std::error_code e) {
  if (e) return end(&gate.counters.timed_out);
  auto decoded = dataplane::decode_hello(hello_bytes);
  if (!decoded) {  // not a handshake: no answer, nothing more read
    gate.log_refusal(peer_of(socket), "its first bytes are not a gridtrain handshake");
    return end(&gate.counters.not_handshake);
  }
  hello = decoded.value();
  Challenge challenge;
  const bool dialer_tls = (hello.protocol & dataplane::kTlsFlag) != 0;
  if ((hello.protocol & ~dataplane::kTlsFlag) != dataplane::kControlProtocol) {
    challenge.refusal = Refusal::protocol;
  } else if (dialer_tls != (gate.tls != nullptr)) {
    challenge.refusal = Refusal::tls_mismatch;
  } else {
    challenge.nonce = nonce = dataplane::make_nonce();
    challenge.mac = dataplane::acceptor_mac(gate.mac, hello.nonce, hello.from_node, hello.to_node, Channel::control);
  }
  dataplane::encode(challenge, std::span<std::byte, dataplane::kChallengeBytes>(challenge_bytes));
  const bool go_on = challenge.refusal == Refusal::none;
  if (challenge.refusal == Refusal::protocol)
    gate.log_refusal(peer_of(socket), "another protocol (a data-plane dialer, or another version)");
  if (challenge.refusal == Refusal::tls_mismatch)
    gate.log_refusal(peer_of(socket), dialer_tls ? "it uses TLS and this node does not (cluster.tls_certificate)"
                                                 : "it does not use TLS and this node does (cluster.tls_certificate)");
  auto* refused = challenge.refusal == Refusal::tls_mismatch ? &gate.counters.tls_refused : &gate.counters.wrong_protocol;
  asio::async_write(socket, asio::buffer(challenge_bytes),
                    [self = shared_from_this(), go_on, refused](std::error_code e, std::size_t) {
                      if (e) return self->end(&self->gate.counters.timed_out);
                      if (!go_on) return self->end(refused);
                      asio::async_read(self->socket, asio::buffer(self->proof_bytes),
                                       [self](std::error_code e, std::size_t) { self->on_proof(e); });
                    });
}

void Handshake::on_proof(std::error_code e) {
  if (e) return end(&gate.counters.timed_out);
  auto proof = dataplane::decode_proof(proof_bytes);
  Verdict verdict;
  if (!proof || !dataplane::equal_macs(proof.value().mac, dataplane::dialer_mac(gate.mac, nonce, hello.from_node,
                                                                                 hello.to_node, Channel::control))) {
    verdict.refusal = Refusal::bad_proof;
    gate.log_refusal(peer_of(socket), "it does not hold the cluster token");
  }
  dataplane::encode(verdict, std::span<std::byte, dataplane::kVerdictBytes>(verdict_bytes));
  asio::async_write(socket, asio::buffer(verdict_bytes),
                    [self = shared_from_this(), ok = verdict.refusal == Refusal::none](std::error_code e, std::size_t) {
                      if (e) return self->end(&self->gate.counters.timed_out);
                      if (!ok) return self->end(&self->gate.counters.bad_proof);
                      if (self->gate.tls) return self->start_tls();
                      self->timer.cancel();
                      self->ended = true;
                      if (!self->gate.stopped) self->gate.hand_to_caf(std::move(self->socket), nullptr);
                    });
}

void Handshake::start_tls() {
  std::error_code ignored;
  socket.non_blocking(true, ignored);
  end_after(kGateHandshakeTimeout);  // TLS's round trips and certificates, after the token's
  session = std::make_unique<TlsSession>(*gate.tls, socket.native_handle(), TlsRole::acceptor);
  dataplane::async_tls_handshake(socket, *session, [self = shared_from_this()](bool ok) {
    if (!ok) {
      if (self->ended) return;  // timed out
      self->gate.log_refusal(peer_of(self->socket), "TLS: " + self->session->error());
      return self->end(&self->gate.counters.tls_refused);
    }
    self->timer.cancel();
    self->ended = true;
    if (!self->gate.stopped) self->gate.hand_to_caf(std::move(self->socket), std::move(self->session));
  });
}

void Handshake::end(std::atomic<std::uint64_t>* counter) {
  if (ended) return;
  ended = true;
  ++*counter;
  timer.cancel();
  std::error_code ignored;
  socket.close(ignored);
}

// -- dialing -------------------------------------------------------------------------------------------------------

// A file descriptor closed with its owner, unless released.
struct Fd {
  int fd = -1;
  explicit Fd(int fd) : fd(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

using Clock = std::chrono::steady_clock;

// Set on a dial's thread: the dial gives up when it is raised (its middleman actor ended).
thread_local const std::atomic<bool>* dial_cancelled = nullptr;

// Waits until `fd` is ready for `events`, at most until `deadline` (or the dial is cancelled: looked at every
// 100 ms).
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    if (dial_cancelled && dial_cancelled->load()) return false;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 100)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

bool send_all(int fd, std::span<const std::byte> bytes, Clock::time_point deadline) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    if (!wait_for(fd, POLLOUT, deadline)) return false;
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

bool receive_all(int fd, std::span<std::byte> bytes, Clock::time_point deadline) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    if (!wait_for(fd, POLLIN, deadline)) return false;
    const ssize_t n = ::recv(fd, bytes.data() + done, bytes.size() - done, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// A non-blocking TCP connection to host:port, or why there is none.
caf::expected<int> connect_to(const std::string& host, std::uint16_t port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string where = host + ":" + std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0)
    return make_gate_error(GateRefusal::unreachable, "cannot resolve " + host + ": " + ::gai_strerror(rc));
  std::string why = "no address";
  bool timed_out = false;  // (the last address tried did not answer in time: a loaded host, not a closed port)
  for (addrinfo* a = found; a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (fd.fd < 0) continue;
    timed_out = false;
    if (::connect(fd.fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      why = std::strerror(errno);
      continue;
    }
    if (!wait_for(fd.fd, POLLOUT, deadline)) {
      why = "timed out";
      timed_out = true;
      continue;
    }
    int error = 0;
    socklen_t length = sizeof error;
    ::getsockopt(fd.fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      why = std::strerror(error);
      timed_out = error == ETIMEDOUT;
      continue;
    }
    ::freeaddrinfo(found);
    return fd.release();
  }
  ::freeaddrinfo(found);
  return make_gate_error(timed_out ? GateRefusal::timed_out : GateRefusal::unreachable,
                         "cannot connect to " + where + ": " + why);
}

// A connection through a gate, ready for CAF's handshake: its socket, and its TLS session when TLS is on.
struct Passed {
  int fd = -1;
  std::unique_ptr<TlsSession> session;
};

// Runs TLS as the dialer on `fd` until it is established, failed, or `deadline` passed.
caf::error run_tls(int fd, TlsSession& session, Clock::time_point deadline, const std::string& where) {
  for (;;) {
    const dataplane::TlsIo io = session.handshake();
    if (io.failed) return make_gate_error(GateRefusal::tls, where + ": " + session.error());
    if (io.want == TlsWant::nothing) return {};
    if (!wait_for(fd, io.want == TlsWant::read ? POLLIN : POLLOUT, deadline))
      return make_gate_error(GateRefusal::timed_out, where + ": the TLS handshake timed out");
  }
}

// Dials host:port and passes its gate (and TLS, when `tls` is set), or says why not.
caf::expected<Passed> dial_through_gate(const std::string& host, std::uint16_t port, const MacFunction& mac,
                                        const std::shared_ptr<const dataplane::TlsContext>& tls) {
  const auto deadline = Clock::now() + kGateHandshakeTimeout;
  const std::string where = host + ":" + std::to_string(port);
  auto connected = connect_to(host, port, deadline);
  if (!connected) return std::move(connected.error());
  Fd fd(*connected);
  const std::uint32_t protocol = dataplane::kControlProtocol | (tls ? dataplane::kTlsFlag : 0u);
  const Hello hello{protocol, 0, 0, 0, 1, dataplane::make_nonce()};
  std::array<std::byte, dataplane::kHelloBytes> hello_bytes{};
  dataplane::encode(hello, std::span<std::byte, dataplane::kHelloBytes>(hello_bytes));
  std::array<std::byte, dataplane::kChallengeBytes> challenge_bytes{};
  // A gate with no room for us answers busy and closes without reading our hello: its answer may be there even
  // where our hello could not go.
  const bool sent = send_all(fd.fd, hello_bytes, deadline);
  if (!receive_all(fd.fd, challenge_bytes, sent ? deadline : Clock::now() + std::chrono::milliseconds(100))) {
    // Silent until the deadline: another service on that port, or a gridtrain node too loaded or stalled to
    // answer, which a join asks again (GateRefusal::timed_out). Closed without an answer: not a gate.
    const bool waited_out = sent && Clock::now() >= deadline;
    return make_gate_error(waited_out ? GateRefusal::timed_out : GateRefusal::not_a_gate,
                           where + " did not answer the gate handshake (not a gridtrain node, or one of another "
                                   "version" + (waited_out ? ", or one stalled or loaded)" : ")"));
  }
  auto challenge = dataplane::decode_challenge(challenge_bytes);
  if (!challenge) return make_gate_error(GateRefusal::not_a_gate, where + ": " + challenge.error().message);
  if (challenge.value().refusal == Refusal::busy)
    return make_gate_error(GateRefusal::busy, where + " has too many handshakes under way (from our address, or in "
                                                      "all): a flood of connections, or many nodes at once");
  if (challenge.value().refusal == Refusal::tls_mismatch)
    return make_gate_error(GateRefusal::tls, tls ? where + " does not use TLS, and this node does (cluster.tls_certificate)"
                                                 : where + " uses TLS, and this node does not: set cluster.tls_certificate, "
                                                           "tls_key and tls_ca");
  if (challenge.value().refusal != Refusal::none)
    return make_gate_error(GateRefusal::not_a_gate, where + " refused us: " + to_string(challenge.value().refusal));
  // A node that does not hold our token is not trusted with a byte of CAF's; our proof still goes out, so that its
  // gate counts and logs a wrong token rather than a dialer that went quiet.
  const bool acceptor_proved =
      dataplane::equal_macs(challenge.value().mac, dataplane::acceptor_mac(mac, hello.nonce, 0, 0, Channel::control));
  std::array<std::byte, dataplane::kProofBytes> proof_bytes{};
  dataplane::encode(Proof{dataplane::dialer_mac(mac, challenge.value().nonce, 0, 0, Channel::control)},
                    std::span<std::byte, dataplane::kProofBytes>(proof_bytes));
  std::array<std::byte, dataplane::kVerdictBytes> verdict_bytes{};
  if (!send_all(fd.fd, proof_bytes, deadline) || !receive_all(fd.fd, verdict_bytes, deadline)) {
    if (!acceptor_proved) return make_gate_error(GateRefusal::wrong_token, where + " does not hold our cluster token");
    return make_gate_error(GateRefusal::unreachable, where + " closed the connection during the gate handshake");
  }
  if (!acceptor_proved) return make_gate_error(GateRefusal::wrong_token, where + " does not hold our cluster token");
  auto verdict = dataplane::decode_verdict(verdict_bytes);
  if (!verdict) return make_gate_error(GateRefusal::not_a_gate, where + ": " + verdict.error().message);
  if (verdict.value().refusal == Refusal::bad_proof)
    return make_gate_error(GateRefusal::wrong_token, where + " refused our cluster token");
  if (verdict.value().refusal != Refusal::none)
    return make_gate_error(GateRefusal::not_a_gate, where + " refused us: " + to_string(verdict.value().refusal));
  Passed passed;
  if (tls) {
    passed.session = std::make_unique<TlsSession>(*tls, fd.fd, TlsRole::dialer);
    if (auto failed = run_tls(fd.fd, *passed.session, deadline, where)) return failed;
  }
  passed.fd = fd.release();
  return passed;
}

// The node's middleman actor: CAF's connect, whose connections pass the gate of the node they dial before CAF's
// handshake, and no port of its own (nodes listen through Gate::open). It implements the middleman_actor
// interface itself rather than CAF's middleman_actor_impl, whose connect() blocks the actor: a dial waits up to
// kGateHandshakeTimeout for the other gate, and a stalled peer (SIGSTOP) then held every other dial and route
// query of the node for 5 s; in the failover tests its survivors could not reach each other to vote. Each dial
// runs on a thread of its own and comes back as a message; dials to one endpoint share one connection, and a
// connection made is cached until its node goes down, as CAF's own middleman actor does (a second connection
// between two nodes confuses CAF 0.17's BASP).
class GateMiddleman : public caf::io::middleman_actor::base {
 public:
  using Address = std::pair<std::string, std::uint16_t>;
  using Signatures = std::set<std::string>;
  using Connected = std::tuple<caf::node_id, caf::strong_actor_ptr, Signatures>;
  // A dial's thread tells the actor it is done (the outcome waits in `done_`).
  using dialed_atom = caf::atom_constant<caf::atom("gtdialed")>;
  struct Dialed {
    Address at;
    caf::expected<Passed> passed;
  };
  // Shared with the dial threads, which may outlive the actor.
  struct Dials {
    std::atomic<bool> cancelled{false};
    std::mutex lock;
    std::vector<Dialed> done;  // REQUIRES: lock held
  };

  GateMiddleman(caf::actor_config& cfg, caf::actor broker, MacFunction mac,
                std::shared_ptr<const dataplane::TlsContext> tls, std::function<void()> on_end)
      : caf::io::middleman_actor::base(cfg),
        broker_(std::move(broker)),
        mac_(std::move(mac)),
        tls_(std::move(tls)),
        on_end_(std::move(on_end)) {
    set_down_handler([this](caf::down_msg& down) {
      for (auto i = cached_.begin(); i != cached_.end();)
        i = std::get<1>(i->second) == down.source ? cached_.erase(i) : std::next(i);
    });
    set_exit_handler([](caf::exit_msg&) {});  // linked to CAF's middleman actor for the order of shutdown only
  }

  const char* name() const override { return "gate_middleman"; }

  void on_exit() override {
    dials_->cancelled.store(true);  // dials under way give up within 100 ms
    // A request still waiting for a dial is answered now, and its promise let go: the promise holds this actor and
    // the requester, so kept it would keep both alive for ever, and a detached requester (a GridMaster) or this
    // actor would hold the actor system's shutdown (it waits for every detached actor to be destroyed).
    for (auto& [at, waiting] : pending_)
      for (auto& promise : waiting)
        promise.deliver(make_gate_error(GateRefusal::unreachable, at.first + ":" + std::to_string(at.second) +
                                                                      ": this node is shutting down"));
    pending_.clear();
    cached_.clear();
    on_end_();
    broker_ = nullptr;
  }

  behavior_type make_behavior() override {
    // It ends with CAF's own middleman actor, which the actor system stops at shutdown.
    link_to(system().middleman().actor_handle());
    set_default_handler([this](caf::scheduled_actor*, caf::message_view& x) -> caf::result<caf::message> {
      if (x.content().match_elements<dialed_atom>()) take_dials();
      return caf::message{};
    });
    auto refuse_port = [](auto&&...) -> caf::result<std::uint16_t> {
      return caf::make_error(caf::sec::cannot_open_port, "a gridtrain node listens only through its gate");
    };
    return {
        [refuse_port](caf::publish_atom, std::uint16_t, caf::strong_actor_ptr&, Signatures&, std::string&, bool) {
          return refuse_port();
        },
        [refuse_port](caf::open_atom, std::uint16_t, std::string&, bool) { return refuse_port(); },
        [this](caf::connect_atom, std::string& host, std::uint16_t port)
            -> caf::delegated<caf::node_id, caf::strong_actor_ptr, Signatures> {
          connect(Address{std::move(host), port});
          return {};
        },
        [this](caf::unpublish_atom atom, caf::actor_addr& addr, std::uint16_t port) -> caf::delegated<void> {
          delegate(broker_, atom, std::move(addr), port);
          return {};
        },
        [this](caf::close_atom atom, std::uint16_t port) -> caf::delegated<void> {
          delegate(broker_, atom, port);
          return {};
        },
        [this](caf::spawn_atom atom, caf::node_id& node, std::string& name, caf::message& args,
               Signatures& signatures) -> caf::delegated<caf::strong_actor_ptr> {
          delegate(broker_, caf::forward_atom::value, node, caf::atom("SpawnServ"),
                   caf::make_message(atom, std::move(name), std::move(args), std::move(signatures)));
          return {};
        },
        [this](caf::get_atom atom, caf::node_id& node) -> caf::delegated<caf::node_id, std::string, std::uint16_t> {
          delegate(broker_, atom, std::move(node));
          return {};
        },
    };
  }

 private:
  // Answers the request from the cache, or joins a dial under way to the same endpoint, or starts one.
  void connect(Address at) {
    auto promise = make_response_promise();
    if (auto found = cached_.find(at); found != cached_.end()) {
      const auto& [node, actor, signatures] = found->second;
      promise.deliver(node, actor, signatures);
      return;
    }
    auto& waiting = pending_[at];
    waiting.push_back(std::move(promise));
    if (waiting.size() > 1) return;
    // The thread holds what it needs by value, and this actor weakly: it may outlive both.
    std::thread([self = caf::actor_cast<caf::weak_actor_ptr>(this), at, mac = mac_, tls = tls_, dials = dials_] {
      dial_cancelled = &dials->cancelled;
      // OpenSSL's state for this thread (the handshake's HMACs, TLS) goes with it, whenever the thread ends: a
      // dial still under way when the process exits is not left holding it.
      struct ThreadStop {
        ~ThreadStop() { OPENSSL_thread_stop(); }
      } stop_openssl;
      Dialed dialed{at, dial_through_gate(at.first, at.second, mac, tls)};
      auto alive = caf::actor_cast<caf::actor>(caf::actor_cast<caf::strong_actor_ptr>(self));
      if (!alive || dials->cancelled.load()) {
        if (dialed.passed) ::close(dialed.passed->fd);
        return;
      }
      {
        std::lock_guard<std::mutex> hold(dials->lock);
        dials->done.push_back(std::move(dialed));
      }
      caf::anon_send(alive, dialed_atom::value);
    }).detach();
  }

  void take_dials() {
    std::vector<Dialed> done;
    {
      std::lock_guard<std::mutex> hold(dials_->lock);
      done.swap(dials_->done);
    }
    for (Dialed& d : done) on_dialed(std::move(d));
  }

  // A dial's outcome: the connection goes to CAF's BASP broker for its handshake, whose answer every request
  // waiting for the endpoint gets.
  void on_dialed(Dialed dialed) {
    const Address at = dialed.at;
    auto fail = [this, at](const caf::error& why) { answer(at, why); };
    if (!dialed.passed) return fail(dialed.passed.error());
    Passed& passed = *dialed.passed;
    caf::io::scribe_ptr scribe = passed.session ? make_tls_scribe(system(), passed.fd, std::move(passed.session))
                                                : system().middleman().backend().new_scribe(passed.fd);
    request(broker_, caf::infinite, caf::connect_atom::value, std::move(scribe), at.second)
        .then(
            [this, at](caf::node_id& node, caf::strong_actor_ptr& actor, Signatures& signatures) {
              if (node && actor) {
                monitor(actor);
                cached_.emplace(at, Connected{node, actor, signatures});
              }
              answer(at, node, actor, signatures);
            },
            fail);
  }

  // Every request waiting for a connection to `at` gets `answer`.
  template <class... Ts>
  void answer(const Address& at, const Ts&... answer) {
    auto waiting = pending_.extract(at);
    if (!waiting.empty())
      for (auto& promise : waiting.mapped()) promise.deliver(answer...);
  }

  caf::actor broker_;
  MacFunction mac_;
  std::shared_ptr<const dataplane::TlsContext> tls_;
  std::function<void()> on_end_;
  std::shared_ptr<Dials> dials_ = std::make_shared<Dials>();
  std::map<Address, Connected> cached_;
  std::map<Address, std::vector<caf::response_promise>> pending_;
};

}  // namespace

GateStats GateCounters::snapshot() const {
  return {accepted, not_handshake, wrong_protocol, bad_proof, timed_out, overflow, busy_address, tls_refused};
}

caf::error make_gate_error(GateRefusal refusal, std::string why) {
  return caf::error(static_cast<std::uint8_t>(refusal), kGateErrorCategory,
                    caf::make_message(std::move(why)));
}

bool may_let_in_later(const caf::error& e) {
  if (e == caf::sec::connection_timeout) return true;  // CAF's handshake, after the gate, took longer than allowed
  return e.category() == kGateErrorCategory && (e.code() == static_cast<std::uint8_t>(GateRefusal::busy) ||
                                                e.code() == static_cast<std::uint8_t>(GateRefusal::timed_out));
}

bool is_refusal(const caf::error& e) {
  return e.category() == kGateErrorCategory && (e.code() == static_cast<std::uint8_t>(GateRefusal::wrong_token) ||
                                                e.code() == static_cast<std::uint8_t>(GateRefusal::tls));
}

std::string render_gate_error(std::uint8_t code, const caf::message& context) {
  std::string why = context.match_elements<std::string>() ? context.get_as<std::string>(0) : "";
  switch (static_cast<GateRefusal>(code)) {
    case GateRefusal::unreachable: return "unreachable: " + why;
    case GateRefusal::wrong_token: return "wrong cluster token: " + why;
    case GateRefusal::not_a_gate: return "not a gridtrain node's gate: " + why;
    case GateRefusal::tls: return "TLS: " + why;
    case GateRefusal::busy: return "busy: " + why;
    case GateRefusal::timed_out: return "timed out: " + why;
  }
  return "gate error " + std::to_string(code) + ": " + why;
}

Gate::Gate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Gate>> Gate::open(caf::actor_system& system, const config::HostPort& listen,
                                         Credentials credentials, caf::actor published) {
  auto impl = std::make_unique<Impl>(system, std::move(credentials), std::move(published));
  std::error_code e;
  const auto host = asio::ip::make_address(listen.host, e);
  if (e) return Error{.key = "cluster.listen", .message = "cannot listen on " + listen.host + ": not an IP address"};
  const tcp::endpoint at(host, listen.port);
  impl->acceptor.open(at.protocol(), e);
  if (!e) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), e);
  if (!e) impl->acceptor.bind(at, e);
  if (!e) impl->acceptor.listen(asio::socket_base::max_listen_connections, e);
  if (e)
    return Error{.key = "cluster.listen", .message = "cannot listen on " + listen.to_string() + ": " + e.message()};
  impl->port = impl->acceptor.local_endpoint().port();
  impl->accept();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->io.run(); });
  return std::unique_ptr<Gate>(new Gate(std::move(impl)));
}

Gate::~Gate() {
  asio::post(impl_->io, [impl = impl_.get()] {
    impl->stopped = true;
    std::error_code ignored;
    impl->acceptor.close(ignored);
    impl->io.stop();  // handshakes under way end with their sockets, unfinished
  });
  impl_->thread.join();
}

std::uint16_t Gate::port() const { return impl_->port; }
const GateCounters& Gate::counters() const { return impl_->counters; }

caf::io::middleman_actor gate_middleman(caf::actor_system& system, const Credentials& credentials) {
  // Keyed by the system's address and the credentials: an entry leaves the map when its actor ends, before its
  // actor system is gone, so a later system at the same address never finds a dead one.
  // Never destroyed: a process that exits with an actor system still up (a fuzz target's cluster) would otherwise
  // release handles at exit into actors CAF has torn down (ASan: heap-use-after-free in ~map at exit).
  using Key = std::tuple<const caf::actor_system*, std::string, const dataplane::TlsContext*>;
  static auto* lock = new std::mutex;
  static auto* actors = new std::map<Key, caf::io::middleman_actor>;
  std::lock_guard<std::mutex> hold(*lock);
  const Key key{&system, credentials.token, credentials.tls.get()};
  if (auto found = actors->find(key); found != actors->end()) return found->second;
  auto on_end = [key] {
    std::lock_guard<std::mutex> hold(*lock);
    actors->erase(key);
  };
  auto broker = system.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  auto actor = system.spawn<GateMiddleman, caf::detached + caf::hidden>(std::move(broker), mac_of(credentials.token),
                                                                         credentials.tls, std::move(on_end));
  actors->emplace(key, actor);
  return actor;
}

}  // namespace gridtrain::actors
