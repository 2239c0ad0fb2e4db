#pragma once
// PrometheusMetrics: a node's metrics on an HTTP /metrics endpoint (metrics.listen; README.md, "Training and
// observability").
// Counters: rounds completed per dimension (rate() gives rounds/s), stale chunks dropped, quorum shortfalls, chunk
// bytes sent and received, chunks left unsent, samples trained on, connections the gate refused (by reason) and
// accepted, what the data plane refused (by reason), messages dropped as unexpected or malformed, Joins the hosted
// GridMaster turned away (by reason). Gauges: line peers not reached (a data address that is wrong, or a port
// closed), and τ, samples/s, training loss and test accuracy of the last epoch.
// Every series carries the label node="<name>".

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/reports.hpp"
#include "base/result.hpp"
#include "config/host_port.hpp"
#include "learner/trainer.hpp"

namespace gridtrain::telemetry {

class PrometheusMetrics {
 public:
  // Listens on `listen` (port 0: a free one). Error: the address cannot be bound.
  static Result<std::unique_ptr<PrometheusMetrics>> start(const config::HostPort& listen,
                                                                  const std::string& node);

  std::uint16_t port() const;

  // The node's counters, as NodeHandle::stats() gives them (cumulative; only their increase is added).
  void update(const actors::NodeStats& stats);
  // The learner's figures at the end of an epoch.
  void update(const learner::EpochReport& report);

 private:
  PrometheusMetrics(std::unique_ptr<prometheus::Exposer> exposer, const std::string& node);

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::string node_;
  std::mutex mutex_;
  prometheus::Family<prometheus::Counter>* rounds_;
  std::vector<prometheus::Counter*> rounds_by_dim_;
  std::vector<std::uint64_t> rounds_seen_;
  prometheus::Counter* stale_;
  prometheus::Counter* bytes_sent_;
  prometheus::Counter* bytes_received_;
  prometheus::Counter* unsent_;
  prometheus::Counter* shortfalls_;
  // One counter per label value, each with the cumulative count it last added up to.
  struct ByReason {
    std::vector<prometheus::Counter*> counters;
    std::vector<std::uint64_t> seen;
  };
  static ByReason by_reason(prometheus::Registry& r, const std::string& name, const std::string& help,
                            const std::string& node, std::initializer_list<const char*> reasons);
  static void advance_each(ByReason& c, std::initializer_list<std::uint64_t> now);
  ByReason refused_;       // the gate's, in GateStats' order
  ByReason data_refused_;  // the data plane's, in DataPlaneStats' order
  ByReason joins_refused_;  // the hosted GridMaster's: rejected, replayed
  prometheus::Counter* dropped_;
  std::uint64_t dropped_seen_ = 0;
  prometheus::Counter* accepted_;
  std::uint64_t accepted_seen_ = 0;
  prometheus::Counter* samples_;
  prometheus::Gauge* unreachable_;
  prometheus::Gauge* tau_;
  prometheus::Gauge* samples_per_s_;
  prometheus::Gauge* loss_;
  prometheus::Gauge* accuracy_;
  std::uint64_t stale_seen_ = 0, shortfalls_seen_ = 0, samples_seen_ = 0;
  std::uint64_t bytes_sent_seen_ = 0, bytes_received_seen_ = 0, unsent_seen_ = 0;
};

}  // namespace gridtrain::telemetry
