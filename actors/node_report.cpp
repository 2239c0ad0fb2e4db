// Reports: every report interval the node tells its GridMaster its figures (a NodeReport, with a sample of its
// model for the replicas' distance), and counts the GridMaster lost when it answers none for the silence limit
// (actors/node_internal.hpp).

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>

#include "actors/direct_connection.hpp"
#include "actors/node_internal.hpp"
#include "allreduce/replica_distance.hpp"

namespace gridtrain::actors::node_internal {

namespace {

NodeReport make_report(Self self, const std::vector<DimensionStats>& dims) {
  auto& s = self->state;
  NodeReport r;
  r.node_id = s.setup.node_id;
  r.lease_stamp = s.lease_stamp;
  NodeFigures& f = r.figures;
  for (const auto& d : dims) {
    f.rounds_done += d.rounds.rounds_done;
    f.stale_dropped += d.rounds.stale_dropped;
    f.quorum_shortfalls += d.rounds.quorum_shortfalls;
  }
  // Read in place, tensor by tensor under its lock: a copy of the model every report cost a 64 MB model 10% of a
  // core. Eight partial sums, so that the loop is not one chain of dependent additions. The samples (for the
  // replicas' distance) every report; the mean and norm when due (NodeState::param_stats).
  const learner::ParameterStore& store = *s.setup.store;
  const std::vector<std::size_t> sampled = allreduce::replica_sample_indices(store.size());  // ascending
  r.sample.values.resize(sampled.size());
  const auto pass_start = std::chrono::steady_clock::now();
  const bool stats_due = pass_start >= s.param_stats.due;
  std::array<double, 8> sums{}, squares{};
  std::size_t next_sample = 0;
  for (std::size_t i = 0; i < store.tensor_count(); ++i) {
    std::lock_guard<std::mutex> hold(store.mutex(i));
    const std::span<const float> x = store.data(i);
    const std::size_t offset = store.tensor(i).offset;
    if (stats_due) {
      std::size_t t = 0;
      for (; t + 8 <= x.size(); t += 8)
        for (std::size_t j = 0; j < 8; ++j) {
          sums[j] += x[t + j];
          squares[j] += static_cast<double>(x[t + j]) * x[t + j];
        }
      for (; t < x.size(); ++t) {
        sums[0] += x[t];
        squares[0] += static_cast<double>(x[t]) * x[t];
      }
    }
    for (; next_sample < sampled.size() && sampled[next_sample] < offset + x.size(); ++next_sample)
      r.sample.values[next_sample] = x[sampled[next_sample] - offset];
  }
  if (stats_due) {
    double sum = 0, square_sum = 0;
    for (std::size_t j = 0; j < 8; ++j) {
      sum += sums[j];
      square_sum += squares[j];
    }
    s.param_stats.mean = store.size() != 0 ? sum / static_cast<double>(store.size()) : 0;
    s.param_stats.l2 = std::sqrt(square_sum);
    const auto pass_end = std::chrono::steady_clock::now();
    s.param_stats.due = pass_end + NodeState::kParamStatsCostFactor * (pass_end - pass_start);
  }
  f.param_mean = s.param_stats.mean;
  f.param_l2 = s.param_stats.l2;
  if (s.grid()) {
    r.epoch = s.grid()->epoch;
    r.layout_version = s.grid()->layout_version;
  }
  if (s.setup.progress) {
    f.samples = s.setup.progress->samples.load(std::memory_order_relaxed);
    f.test_accuracy = s.setup.progress->test_accuracy.load(std::memory_order_relaxed);
    f.epochs_done = s.setup.progress->epochs_done.load(std::memory_order_relaxed);
  }
  return r;  // without a trainer, samples and test_accuracy stay 0 and -1
}

// Says how this node reaches `node` now: over its own connection, or through another node (which does not report
// that node's death). Asynchronous: one log line.
void log_route(Self self, const caf::node_id& node, std::string what) {
  self->request(middleman(self), std::chrono::seconds(2), caf::get_atom::value, node)
      .then(
          [self, what](caf::node_id&, std::string& host, std::uint16_t port) {
            spdlog::info("node {:016x}: its route to {}: {}", self->state.setup.node_id, what,
                         host.empty() ? std::string("through another node") : fmt::format("direct, {}:{}", host, port));
          },
          [](caf::error&) {});
}

// True, and the cluster lost, when the GridMaster has answered none of this node's reports for the silence limit.
// CAF tells a node of its GridMaster's death only over a direct connection: behind a relay, or over a connection
// that CAF 0.17 confused (two per pair of nodes), a member once followed a GridMaster dead for minutes while the
// others waited for its vote (seen in a 30-minute chaos run). A late tick means this node itself did not run (its
// process was stopped): that silence is its own, CAF's connection timeout judges it, and the watch starts afresh.
bool lost_silent_grid_master(Self self) {
  auto& s = self->state;
  const auto now = self->clock().now();
  const auto limit = silence_limit(s.cluster_config.value_or(s.setup.config));
  if (now - s.last_report_tick > limit / 2) s.grid_master_heard = now;
  s.last_report_tick = now;
  if (now - s.grid_master_heard <= limit) return false;
  if (s.grid_master && s.grid_master.node() != self->node())
    log_route(self, s.grid_master.node(), "the GridMaster's node");
  answer_passed_joins(self);
  lose_cluster(self, fmt::format("no answer from the GridMaster for over {} ms", limit.count()), true);
  return true;
}

// The GridMaster's answer to a report of `generation`: it counts this node (alive, and the route works both
// ways), or it does not (it took the node out, and its Removed was lost).
void on_report_answer(Self self, std::uint64_t generation, bool counted, std::int64_t stamp) {
  auto& s = self->state;
  if (generation != s.report_generation || s.phase != NodePhase::member) return;
  if (counted) {
    s.grid_master_heard = self->clock().now();
    s.lease_stamp = std::max(s.lease_stamp, stamp);
  } else
    lose_cluster(self, "the GridMaster no longer counts it as a member", false);
}

}  // namespace

// How long a GridMaster and a member go without hearing from each other before each counts the other lost: four
// connection timeouts, and no less than 2 s, so that it finds only what CAF cannot (nodes report every 250 ms).
std::chrono::milliseconds silence_limit(const config::Config& config) {
  return std::max(std::chrono::milliseconds(4 * config.cluster.connection_timeout_ms),
                  std::chrono::milliseconds(2000));
}

// The GridMaster's lease (GridMasterSetup::lease): two connection timeouts, and no less than 1 s. Its members echo
// its answers every report (250 ms), so a lease this long is lost only when a majority's reports stop for well
// over a second: where CAF would count those connections lost anyway.
std::chrono::milliseconds grid_master_lease(const config::Config& config) {
  return std::max(std::chrono::milliseconds(2 * config.cluster.connection_timeout_ms),
                  std::chrono::milliseconds(1000));
}

// How long after its last answer from the GridMaster a node that lost it waits before it votes or stands: the
// lease, an eighth of it for the GridMaster's look (it checks every eighth), and an eighth for a late look.
std::chrono::milliseconds lease_wait(const config::Config& config) {
  const auto lease = grid_master_lease(config);
  return lease + lease / 4;
}

// Asks every DimensionNode for its counters, then calls `done` with them (a default entry for one that did not
// answer). Pulled, not pushed: the DimensionNodes change their counters thousands of times a second.
void collect_dims(Self self, std::function<void(std::vector<DimensionStats>)> done) {
  auto& s = self->state;
  struct Pending {
    std::vector<DimensionStats> dims;
    std::size_t missing;
    std::function<void(std::vector<DimensionStats>)> done;
  };
  auto pending =
      std::make_shared<Pending>(Pending{std::vector<DimensionStats>(kDimsOffered), kDimsOffered, std::move(done)});
  for (std::uint32_t d = 0; d < kDimsOffered; ++d) {
    pending->dims[d].dim = d;
    auto arrived = [pending] {
      if (--pending->missing == 0) pending->done(std::move(pending->dims));
    };
    self->request(s.dimension_nodes[d], std::chrono::seconds(10), stats_atom::value)
        .then([pending, d, arrived](DimensionStats& x) { pending->dims[d] = std::move(x); arrived(); },
              [arrived](caf::error&) { arrived(); });
  }
}

// One report to the GridMaster, of the membership `generation`.
void report(Self self, std::uint64_t generation) {
  collect_dims(self, [self, generation](std::vector<DimensionStats> dims) {
    auto& s = self->state;
    if (!s.grid_master || generation != s.report_generation) return;
    self->request(s.grid_master, silence_limit(s.cluster_config.value_or(s.setup.config)), make_report(self, dims))
        .then([self, generation](bool counted,
                                 std::int64_t stamp) { on_report_answer(self, generation, counted, stamp); },
              [](caf::error&) {});  // no answer: lost_silent_grid_master() judges the silence
  });
}

void send_reports(Self self, std::uint64_t generation) {
  auto& s = self->state;
  if (generation != s.report_generation) return;  // an older membership's timer (only a member's behaviour takes ticks)
  if (lost_silent_grid_master(self)) return;
  report(self, generation);
  // A direct connection can be lost while both nodes live on (CAF closes one of two connections that a pair
  // dialed at once, and may purge the routes of the other side): then the pair talks through a relay, which does
  // not report a death. Checked again every few seconds; connect_directly() says which side dials.
  if (++s.reports_sent % kRouteCheckEvery == 0 && s.grid_master)
    connect_directly(self, s.setup.credentials, s.setup.node_id, s.grid_master_node_id, s.grid_master,
                     s.grid_master_address);
  self->delayed_send(self, s.setup.report_interval, tick_atom::value, generation);
}

}  // namespace gridtrain::actors::node_internal
