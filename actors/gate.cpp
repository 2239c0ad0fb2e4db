#include "actors/gate.hpp"

#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <openssl/crypto.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <asio.hpp>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "actors/tls_scribe.hpp"
#include "actors/token_proof.hpp"
#include "dataplane/admission.hpp"
#include "dataplane/handshake.hpp"
#include "dataplane/handshake_session.hpp"

namespace gridtrain::actors {

namespace {

using tcp = asio::ip::tcp;
using dataplane::Channel;
using dataplane::Hello;
using dataplane::MacFunction;
using dataplane::Nonce;
using dataplane::Refusal;
using dataplane::TlsSession;

MacFunction mac_of(std::string token) {
  return [token = std::move(token)](std::span<const std::byte> message) { return token_mac(token, message); };
}

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
          handshake(std::move(s), std::move(*admitted.ticket));
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

  // Runs the handshake (dataplane/handshake_session.hpp, channel `control`) on an admitted connection, and hands
  // it to CAF if it passes; counts and logs what it turned away.
  void handshake(tcp::socket socket, dataplane::Admission::Ticket ticket) {
    dataplane::AcceptorTerms terms{.channel = Channel::control,
                                   .tls = tls,
                                   .protocol = dataplane::kControlProtocol,
                                   .hello_timeout = kGateAcceptTimeout,
                                   .tls_timeout = kGateHandshakeTimeout,
                                   .answer = [this](const Hello&) {
                                     return dataplane::HelloAnswer{.refusal = Refusal::none, .mac = mac};
                                   }};
    dataplane::run_acceptor_handshake(std::move(socket), std::move(ticket), std::move(terms),
                                      [this](dataplane::Accepted a) { on_handshake(std::move(a)); });
  }

  void on_handshake(dataplane::Accepted a) {
    using dataplane::AcceptEnd;
    switch (a.end) {
      case AcceptEnd::passed:
        if (!stopped) hand_to_caf(std::move(a.socket), std::move(a.session));
        return;
      case AcceptEnd::silent:
      case AcceptEnd::gone:
        ++counters.timed_out;
        return;
      case AcceptEnd::not_handshake:
        log_refusal(a.peer, "its first bytes are not a gridtrain handshake");
        ++counters.not_handshake;
        return;
      case AcceptEnd::refused:
        if (a.refusal == Refusal::tls_mismatch) {
          log_refusal(a.peer, (a.hello.protocol & dataplane::kTlsFlag)
                                  ? "it uses TLS and this node does not (cluster.tls_certificate)"
                                  : "it does not use TLS and this node does (cluster.tls_certificate)");
          ++counters.tls_refused;
        } else {
          log_refusal(a.peer, "another protocol (a data-plane dialer, or another version)");
          ++counters.wrong_protocol;
        }
        return;
      case AcceptEnd::bad_proof:
        log_refusal(a.peer, "it does not hold the cluster token");
        ++counters.bad_proof;
        return;
      case AcceptEnd::tls_failed:
        if (a.tls_error.empty()) {  // timed out
          ++counters.timed_out;
          return;
        }
        log_refusal(a.peer, "TLS: " + a.tls_error);
        ++counters.tls_refused;
        return;
    }
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
  // pending when the gate closes are destroyed with `io` (their `done` never called).
  std::shared_ptr<dataplane::Admission> admission =
      std::make_shared<dataplane::Admission>(kGateMaxPending, kGateMaxPendingPerAddress);
  std::set<std::string> logged;
  bool stopped = false;
  GateCounters counters;
  std::thread thread;
};

namespace {

// -- dialing -------------------------------------------------------------------------------------------------------

// A dial's outcome: a connection through the gate dialed, ready for CAF's handshake (its TLS session when TLS is
// on), or the gate error that says why not.
struct Passed {
  int fd = -1;  // released from its Asio socket: CAF's scribe takes it
  std::unique_ptr<TlsSession> session;
};

// Says as a gate error what the handshake with `where`'s gate came to, where it did not pass.
caf::error dial_error(const std::string& where, const dataplane::Dialed& d, bool tls) {
  using dataplane::DialEnd;
  switch (d.end) {
    case DialEnd::passed: break;
    case DialEnd::refused:
      if (d.refusal == Refusal::busy)
        return make_gate_error(GateRefusal::busy, where + " has too many handshakes under way (from our address, or "
                                                          "in all): a flood of connections, or many nodes at once");
      if (d.refusal == Refusal::tls_mismatch)
        return make_gate_error(GateRefusal::tls,
                               tls ? where + " does not use TLS, and this node does (cluster.tls_certificate)"
                                   : where + " uses TLS, and this node does not: set cluster.tls_certificate, "
                                             "tls_key and tls_ca");
      return make_gate_error(GateRefusal::not_a_gate, where + " " + d.why);
    case DialEnd::wrong_token:
    case DialEnd::bad_proof: return make_gate_error(GateRefusal::wrong_token, where + " " + d.why);
    case DialEnd::no_answer: return make_gate_error(GateRefusal::not_a_gate, where + " " + d.why);
    case DialEnd::closed: return make_gate_error(GateRefusal::unreachable, where + " " + d.why);
    case DialEnd::timed_out: return make_gate_error(GateRefusal::timed_out, where + " " + d.why);
    case DialEnd::tls_failed: return make_gate_error(GateRefusal::tls, where + ": " + d.why);
  }
  return make_gate_error(GateRefusal::unreachable, where + ": no outcome");
}

// The dials of one middleman actor: on one thread of their own (resolve, connect, the gate's handshake, TLS), each
// within kGateHandshakeTimeout. A dial's outcome waits in `done` and the actor is told; the thread outlives the
// actor only until the actor's on_exit stops it.
class Dialer {
 public:
  using Address = std::pair<std::string, std::uint16_t>;
  struct Dialed {
    Address at;
    caf::expected<Passed> passed;
  };

  Dialer(MacFunction mac, std::shared_ptr<const dataplane::TlsContext> tls)
      : mac_(std::move(mac)), tls_(std::move(tls)), work_(io_.get_executor()) {
    thread_ = std::thread([this] {
      io_.run();
      OPENSSL_thread_stop();  // the handshakes' HMACs and TLS state of this thread
    });
  }
  ~Dialer() { stop(); }

  // Dials `at` and calls `told` (on this dialer's thread) once its outcome is in `take()`.
  void dial(Address at, std::function<void()> told) {
    asio::post(io_, [this, at = std::move(at), told = std::move(told)]() mutable {
      start(std::move(at), std::move(told));
    });
  }

  // The dials that ended since the last call.
  std::vector<Dialed> take() {
    std::lock_guard<std::mutex> hold(lock_);
    return std::exchange(done_, {});
  }

  // Ends every dial under way (unfinished, untold) and the thread; closes the connections no one took.
  void stop() {
    if (!thread_.joinable()) return;
    work_.reset();
    io_.stop();
    thread_.join();
    for (Dialed& d : take())
      if (d.passed) ::close(d.passed->fd);
  }

 private:
  struct Attempt {
    Address at;
    std::string where;
    std::function<void()> told;
    tcp::resolver resolver;
    tcp::socket socket;
    asio::steady_timer deadline;
    bool expired = false;
    Attempt(asio::io_context& io, Address a, std::function<void()> t)
        : at(std::move(a)),
          where(at.first + ":" + std::to_string(at.second)),
          told(std::move(t)),
          resolver(io),
          socket(io),
          deadline(io) {}
  };

  void start(Address at, std::function<void()> told) {
    auto attempt = std::make_shared<Attempt>(io_, std::move(at), std::move(told));
    attempt->deadline.expires_after(kGateHandshakeTimeout);
    // A firewall that drops the SYNs would hold the connect for the kernel's two minutes of retries.
    attempt->deadline.async_wait([attempt](std::error_code e) {
      if (e) return;
      attempt->expired = true;
      attempt->resolver.cancel();
      std::error_code ignored;
      attempt->socket.close(ignored);
    });
    attempt->resolver.async_resolve(
        attempt->at.first, std::to_string(attempt->at.second),
        [this, attempt](std::error_code e, tcp::resolver::results_type found) {
          if (e) {
            const GateRefusal why = attempt->expired ? GateRefusal::timed_out : GateRefusal::unreachable;
            return finish(*attempt, make_gate_error(why, "cannot resolve " + attempt->at.first + ": " + e.message()));
          }
          // Past the deadline, no further address is tried.
          auto in_time = [attempt](const std::error_code&, const tcp::endpoint&) { return !attempt->expired; };
          auto connected = [this, attempt](std::error_code e, const tcp::endpoint&) {
            const std::string cannot = "cannot connect to " + attempt->where + ": ";
            if (attempt->expired)
              return finish(*attempt, make_gate_error(GateRefusal::timed_out, cannot + "timed out"));
            if (e)
              return finish(*attempt, make_gate_error(e == asio::error::timed_out ? GateRefusal::timed_out
                                                                                   : GateRefusal::unreachable,
                                                      cannot + e.message()));
            handshake(attempt);
          };
          asio::async_connect(attempt->socket, found, in_time, std::move(connected));
        });
  }

  void handshake(const std::shared_ptr<Attempt>& attempt) {
    const auto left = attempt->deadline.expiry() - std::chrono::steady_clock::now();
    attempt->deadline.cancel();
    const std::uint32_t protocol = dataplane::kControlProtocol | (tls_ ? dataplane::kTlsFlag : 0u);
    dataplane::DialerTerms terms{
        .hello = Hello{protocol, 0, 0, 0, 1, Nonce{}},
        .mac = mac_,
        .channel = Channel::control,
        .tls = tls_,
        .timeout = std::max<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(1)),
        .name = "gate handshake"};
    auto done = [this, attempt](dataplane::Dialed d) {
      if (d.end != dataplane::DialEnd::passed) return finish(*attempt, dial_error(attempt->where, d, tls_ != nullptr));
      std::error_code e;
      const int fd = d.socket.release(e);
      if (e) return finish(*attempt, make_gate_error(GateRefusal::unreachable, attempt->where + ": " + e.message()));
      finish(*attempt, Passed{fd, std::move(d.session)});
    };
    dataplane::run_dialer_handshake(std::move(attempt->socket), std::move(terms), std::move(done));
  }

  void finish(Attempt& attempt, caf::expected<Passed> passed) {
    attempt.deadline.cancel();
    {
      std::lock_guard<std::mutex> hold(lock_);
      done_.push_back(Dialed{attempt.at, std::move(passed)});
    }
    attempt.told();
  }

  MacFunction mac_;
  std::shared_ptr<const dataplane::TlsContext> tls_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
  std::mutex lock_;
  std::vector<Dialed> done_;  // REQUIRES: lock_ held
};

// The node's middleman actor: CAF's connect, whose connections pass the gate of the node they dial before CAF's
// handshake, and no port of its own (nodes listen through Gate::open). It implements the middleman_actor
// interface itself rather than CAF's middleman_actor_impl, whose connect() blocks the actor: a dial waits up to
// kGateHandshakeTimeout for the other gate, and a stalled peer (SIGSTOP) then held every other dial and route
// query of the node for 5 s; in the failover tests its survivors could not reach each other to vote. Dials run on
// the Dialer's thread and come back as messages; dials to one endpoint share one connection, and a
// connection made is cached until its node goes down, as CAF's own middleman actor does (a second connection
// between two nodes confuses CAF 0.17's BASP).
class GateMiddleman : public caf::io::middleman_actor::base {
 public:
  using Address = std::pair<std::string, std::uint16_t>;
  using Signatures = std::set<std::string>;
  using Connected = std::tuple<caf::node_id, caf::strong_actor_ptr, Signatures>;
  // The dialer's thread tells the actor that a dial ended (its outcome waits in the dialer).
  using dialed_atom = caf::atom_constant<caf::atom("gtdialed")>;

  GateMiddleman(caf::actor_config& cfg, caf::actor broker, MacFunction mac,
                std::shared_ptr<const dataplane::TlsContext> tls, std::function<void()> on_end)
      : caf::io::middleman_actor::base(cfg),
        broker_(std::move(broker)),
        dialer_(std::make_unique<Dialer>(std::move(mac), std::move(tls))),
        on_end_(std::move(on_end)) {
    set_down_handler([this](caf::down_msg& down) {
      for (auto i = cached_.begin(); i != cached_.end();)
        i = std::get<1>(i->second) == down.source ? cached_.erase(i) : std::next(i);
    });
    set_exit_handler([](caf::exit_msg&) {});  // linked to CAF's middleman actor for the order of shutdown only
  }

  const char* name() const override { return "gate_middleman"; }

  void on_exit() override {
    dialer_->stop();  // dials under way end unfinished
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
    // The dialer's thread holds this actor weakly: the actor may end while a dial is under way.
    dialer_->dial(std::move(at), [self = caf::actor_cast<caf::weak_actor_ptr>(this)] {
      if (auto alive = caf::actor_cast<caf::actor>(caf::actor_cast<caf::strong_actor_ptr>(self)))
        caf::anon_send(alive, dialed_atom::value);
    });
  }

  void take_dials() {
    for (Dialer::Dialed& d : dialer_->take()) on_dialed(std::move(d));
  }

  // A dial's outcome: the connection goes to CAF's BASP broker for its handshake, whose answer every request
  // waiting for the endpoint gets.
  void on_dialed(Dialer::Dialed dialed) {
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
  std::unique_ptr<Dialer> dialer_;
  std::function<void()> on_end_;
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
