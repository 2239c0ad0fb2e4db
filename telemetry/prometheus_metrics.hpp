#pragma once
// PrometheusMetrics: a node's metrics on an HTTP /metrics endpoint (metrics.listen; README.md, "Training and
// observability").
// Counters: rounds completed per dimension (rate() gives rounds/s), stale chunks dropped, quorum shortfalls, chunk
// bytes sent and received, chunks left unsent, samples trained on, connections the gate refused (by reason) and
// accepted. Gauges: τ, samples/s, training loss and test
// accuracy of the last epoch.
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
#include "config/endpoint.hpp"
#include "learner/trainer.hpp"

namespace gridtrain::telemetry {

class PrometheusMetrics {
 public:
  // Listens on `listen` (port 0: a free one). Error: the address cannot be bound.
  static Result<std::unique_ptr<PrometheusMetrics>> start(const config::Endpoint& listen,
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
  std::vector<prometheus::Counter*> refused_;  // by reason, in GateStats' order
  std::vector<std::uint64_t> refused_seen_;
  prometheus::Counter* accepted_;
  std::uint64_t accepted_seen_ = 0;
  prometheus::Counter* samples_;
  prometheus::Gauge* tau_;
  prometheus::Gauge* samples_per_s_;
  prometheus::Gauge* loss_;
  prometheus::Gauge* accuracy_;
  std::uint64_t stale_seen_ = 0, shortfalls_seen_ = 0, samples_seen_ = 0;
  std::uint64_t bytes_sent_seen_ = 0, bytes_received_seen_ = 0, unsent_seen_ = 0;
};

}  // namespace gridtrain::telemetry
