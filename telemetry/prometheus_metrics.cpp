#include "telemetry/prometheus_metrics.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>

namespace gridtrain::telemetry {

namespace {

prometheus::Counter* counter(prometheus::Registry& r, const std::string& name, const std::string& help,
                             const std::string& node) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({{"node", node}});
}

prometheus::Gauge* gauge(prometheus::Registry& r, const std::string& name, const std::string& help,
                         const std::string& node) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({{"node", node}});
}

// Adds to `c` what a cumulative count gained since `seen`; a count that went back (a new line) adds nothing.
void advance(prometheus::Counter* c, std::uint64_t now, std::uint64_t& seen) {
  if (now > seen) c->Increment(static_cast<double>(now - seen));
  seen = now;
}

// Why `listen` cannot be bound, as the system says it ("Address already in use"), or "" if it can: CivetWeb's
// exception says only "null context when constructing CivetServer. Possible problem binding to port."
std::string bind_failure(const config::HostPort& listen) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(listen.port);
  if (const int e = ::getaddrinfo(listen.host.c_str(), port.c_str(), &hints, &found); e != 0)
    return ::gai_strerror(e);  // the error's source names the address
  std::string why;
  const int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  const int on = 1;
  if (fd < 0) {
    why = std::strerror(errno);
  } else if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
             ::bind(fd, found->ai_addr, found->ai_addrlen) != 0) {
    why = std::strerror(errno);
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  return why;
}

}  // namespace

Result<std::unique_ptr<PrometheusMetrics>> PrometheusMetrics::start(const config::HostPort& listen,
                                                                           const std::string& node) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(listen.host + ":" + std::to_string(listen.port));
  } catch (const std::exception& e) {
    const std::string why = bind_failure(listen);
    return Error{.source = listen.to_string(), .key = "metrics.listen",
                 .message = "cannot listen: " + (why.empty() ? std::string(e.what()) : why)};
  }
  return std::unique_ptr<PrometheusMetrics>(new PrometheusMetrics(std::move(exposer), node));
}

PrometheusMetrics::PrometheusMetrics(std::unique_ptr<prometheus::Exposer> exposer, const std::string& node)
    : exposer_(std::move(exposer)), registry_(std::make_shared<prometheus::Registry>()), node_(node) {
  auto& r = *registry_;
  rounds_ = &prometheus::BuildCounter()
                 .Name("gridtrain_rounds_total")
                 .Help("allreduce rounds completed (elastic updates), per grid dimension")
                 .Register(r);
  stale_ = counter(r, "gridtrain_stale_dropped_total", "chunks of rounds or lines left behind, dropped", node);
  bytes_sent_ = counter(r, "gridtrain_bytes_sent_total", "chunk payload bytes written to line peers", node);
  bytes_received_ = counter(r, "gridtrain_bytes_received_total", "chunk payload bytes received that counted", node);
  unsent_ = counter(r, "gridtrain_frames_unsent_total",
                    "chunks dropped before they were written: their round moved on, or the peer had no connection",
                    node);
  shortfalls_ = counter(r, "gridtrain_quorum_shortfalls_total",
                        "rounds completed with a chunk averaged over fewer than all peers", node);
  refused_ = by_reason(r, "gridtrain_connections_refused_total",
                       "connections the node's gate turned away before CAF saw a byte, by reason", node,
                       {"not_handshake", "wrong_protocol", "bad_proof", "timed_out", "overflow", "busy_address",
                        "tls"});
  data_refused_ = by_reason(r, "gridtrain_data_refused_total",
                            "data-plane connections and frames refused (each closes its connection), by reason", node,
                            {"handshake", "bad_frame", "oversized", "truncated", "stranger", "busy", "busy_address"});
  joins_refused_ = by_reason(r, "gridtrain_joins_refused_total",
                             "Joins the GridMaster this node hosts turned away: rejected (with a reason), or "
                             "replayed (a nonce it did not send or took already)",
                             node, {"rejected", "replayed"});
  dropped_ = counter(r, "gridtrain_messages_dropped_total",
                     "control messages and frames that could not belong to this node (unexpected, malformed, a "
                     "payload longer than its message), dropped",
                     node);
  accepted_ = counter(r, "gridtrain_connections_accepted_total",
                      "connections that proved the cluster token at the node's gate and went on to CAF", node);
  unreachable_ = gauge(r, "gridtrain_data_peers_unreachable",
                       "line peers this node dials and has not reached for 10 s: a wrong data address, or a data "
                       "port closed between machines",
                       node);
  samples_ = counter(r, "gridtrain_samples_total", "training samples the learner has stepped over", node);
  tau_ = gauge(r, "gridtrain_tau", "learner steps per completed elastic update, over the last epoch", node);
  samples_per_s_ = gauge(r, "gridtrain_samples_per_second", "learner throughput over the last epoch", node);
  loss_ = gauge(r, "gridtrain_train_loss", "mean training loss over the last epoch", node);
  accuracy_ = gauge(r, "gridtrain_test_accuracy", "test accuracy after the last epoch", node);
  exposer_->RegisterCollectable(registry_);
}

PrometheusMetrics::ByReason PrometheusMetrics::by_reason(prometheus::Registry& r, const std::string& name,
                                                         const std::string& help, const std::string& node,
                                                         std::initializer_list<const char*> reasons) {
  auto& family = prometheus::BuildCounter().Name(name).Help(help).Register(r);
  ByReason out;
  for (const char* reason : reasons) out.counters.push_back(&family.Add({{"node", node}, {"reason", reason}}));
  out.seen.assign(out.counters.size(), 0);
  return out;
}

void PrometheusMetrics::advance_each(ByReason& c, std::initializer_list<std::uint64_t> now) {
  std::size_t i = 0;
  for (std::uint64_t n : now) {
    advance(c.counters[i], n, c.seen[i]);
    ++i;
  }
}

std::uint16_t PrometheusMetrics::port() const {
  auto ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : static_cast<std::uint16_t>(ports.front());
}

void PrometheusMetrics::update(const actors::NodeStats& stats) {
  std::lock_guard lock(mutex_);
  for (std::size_t d = rounds_by_dim_.size(); d < stats.dims.size(); ++d) {
    rounds_by_dim_.push_back(&rounds_->Add({{"node", node_}, {"dim", std::to_string(d)}}));
    rounds_seen_.push_back(0);
  }
  for (std::size_t d = 0; d < stats.dims.size(); ++d)
    advance(rounds_by_dim_[d], stats.dims[d].rounds.rounds_done, rounds_seen_[d]);
  auto total = stats.total();
  advance(stale_, total.stale_dropped, stale_seen_);
  advance(bytes_sent_, total.bytes_sent, bytes_sent_seen_);
  advance(bytes_received_, total.bytes_received, bytes_received_seen_);
  advance(unsent_, total.frames_unsent, unsent_seen_);
  advance(shortfalls_, total.quorum_shortfalls, shortfalls_seen_);
  const auto& g = stats.gate;
  advance_each(refused_, {g.not_handshake, g.wrong_protocol, g.bad_proof, g.timed_out, g.overflow, g.busy_address,
                          g.tls_refused});
  const auto& d = stats.data_plane;
  advance_each(data_refused_,
               {d.handshakes, d.bad_frames, d.oversized, d.truncated, d.strangers, d.busy, d.busy_address});
  unreachable_->Set(static_cast<double>(d.unreachable_peers));
  advance_each(joins_refused_, {stats.joins.rejected, stats.joins.replayed});
  advance(dropped_, stats.bad_messages + stats.joins.bad_messages + stats.refused_payloads, dropped_seen_);
  advance(accepted_, g.accepted, accepted_seen_);
}

void PrometheusMetrics::update(const learner::EpochReport& report) {
  std::lock_guard lock(mutex_);
  advance(samples_, report.samples, samples_seen_);
  tau_->Set(std::isfinite(report.tau) ? report.tau : std::nan(""));
  samples_per_s_->Set(report.samples_per_s);
  loss_->Set(report.loss);
  accuracy_->Set(report.test_accuracy);
}

}  // namespace gridtrain::telemetry
