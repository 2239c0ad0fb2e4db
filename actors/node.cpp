#include "actors/node.hpp"

#include <caf/io/middleman.hpp>
#include <spdlog/spdlog.h>

#include <cmath>
#include <functional>
#include <memory>
#include <set>
#include <tuple>

#include "actors/dimension_node.hpp"
#include "actors/direct_connection.hpp"
#include "actors/dropped.hpp"
#include "actors/grid_master.hpp"
#include "actors/line_master.hpp"
#include "actors/token_proof.hpp"
#include "allreduce/replica_distance.hpp"

namespace gridtrain::actors {

namespace {

using Self = caf::stateful_actor<NodeState>*;

void send_join(Self self, const caf::actor& to) {
  auto& s = self->state;
  self->send(to, Join{s.setup.node_id, s.address, s.setup.store->signature(), s.setup.store->size(), protocol_version,
                      token_proof(s.setup.token, s.setup.node_id), caf::actor_cast<caf::actor>(self),
                      s.dimension_nodes, s.line_masters});
}

// The join is over, one way or another: tell whoever waits. A node that is not in ends.
void conclude(Self self, JoinResult result, std::string reason) {
  auto& s = self->state;
  if (s.outcome.result != JoinResult::pending) return;
  s.outcome = {result, std::move(reason)};
  if (s.setup.outcome) s.setup.outcome->set_value(s.outcome);
  for (auto& waiter : s.outcome_waiters) waiter.deliver(s.outcome);
  s.outcome_waiters.clear();
  if (result == JoinResult::welcomed) return;
  spdlog::error("node {:016x}: {}: {}", s.setup.node_id, to_string(result), s.outcome.reason);
  self->quit(caf::exit_reason::user_shutdown);
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

NodeReport make_report(Self self, const std::vector<DimensionStats>& dims) {
  auto& s = self->state;
  NodeReport r;
  r.node_id = s.setup.node_id;
  NodeFigures& f = r.figures;
  for (const auto& d : dims) {
    f.rounds_done += d.rounds.rounds_done;
    f.stale_dropped += d.rounds.stale_dropped;
    f.quorum_shortfalls += d.rounds.quorum_shortfalls;
  }
  s.parameters.resize(s.setup.store->size());
  s.setup.store->fetch(s.parameters);
  double sum = 0, squares = 0;
  for (float x : s.parameters) {
    sum += x;
    squares += static_cast<double>(x) * x;
  }
  if (!s.parameters.empty()) f.param_mean = sum / static_cast<double>(s.parameters.size());
  f.param_l2 = std::sqrt(squares);
  for (std::size_t i : allreduce::replica_sample_indices(s.parameters.size()))
    r.sample.values.push_back(s.parameters[i]);
  if (s.setup.progress) {
    f.samples = s.setup.progress->samples.load(std::memory_order_relaxed);
    f.test_accuracy = s.setup.progress->test_accuracy.load(std::memory_order_relaxed);
  }
  return r;  // without a trainer, samples and test_accuracy stay 0 and -1
}

void begin(Self self, std::string address) {
  auto& s = self->state;
  s.address = std::move(address);
  self->delayed_send(self, s.setup.join_timeout, join_timeout_atom::value);
  if (s.setup.seed_node) {
    send_join(self, s.setup.seed_node);
  } else if (s.setup.seed_address) {
    const config::Endpoint seed = *s.setup.seed_address;
    self->request(self->system().middleman().actor_handle(), s.setup.join_timeout, caf::connect_atom::value,
                  seed.host, seed.port)
        .then(
            [self, seed](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
              if (!ptr) return conclude(self, JoinResult::unreachable, "no node at seed " + seed.to_string());
              send_join(self, caf::actor_cast<caf::actor>(ptr));
            },
            [self, seed](caf::error& e) {
              conclude(self, JoinResult::unreachable,
                       "cannot reach seed " + seed.to_string() + ": " + self->system().render(e));
            });
  } else {
    // Bootstrap: this node hosts the cluster's GridMaster, and joins it like any other node.
    auto gm = self->spawn<caf::linked>(
        grid_master,
        GridMasterSetup{s.setup.config, s.setup.token, s.setup.store->signature(), s.setup.store->size(), s.address,
                        s.setup.node_id});
    send_join(self, gm);
  }
}

}  // namespace

caf::behavior node(caf::stateful_actor<NodeState>* self, NodeSetup setup) {
  auto& s = self->state;
  s.setup = std::move(setup);
  for (std::uint32_t d = 0; d < kDimsOffered; ++d) {
    s.dimension_nodes.push_back(self->spawn<caf::linked>(
        dimension_node, DimensionNodeSetup{d, s.setup.node_id, s.setup.store}));
    s.line_masters.push_back(self->spawn<caf::linked>(line_master, d, s.setup.paced_by_every_steps));
  }
  drop_unexpected(self);
  self->set_down_handler([self](caf::down_msg& down) {
    auto& s = self->state;
    if (s.grid_master && down.source == s.grid_master.address()) {
      // No failover yet (docs/design.md): the lines keep running with their members; membership is frozen.
      spdlog::warn("node {:016x}: the GridMaster is down; lines go on with their current members", s.setup.node_id);
      s.grid_master = nullptr;
    }
  });
  return {
      [self](begin_atom, std::string& address) { begin(self, std::move(address)); },
      [self](join_timeout_atom) {
        conclude(self, JoinResult::unreachable,
                 "no answer from the seed within " + std::to_string(self->state.setup.join_timeout.count()) + " ms");
      },
      [self](const Welcome& w) {
        auto& s = self->state;
        if (s.outcome.result != JoinResult::pending || w.node_id != s.setup.node_id || !w.grid_master) return;
        s.grid_master = w.grid_master;
        s.epoch = w.epoch;
        self->monitor(s.grid_master);
        // The welcome may have come through the seed; membership traffic should not depend on it. (Only if our
        // id is the lower one: connect_directly() says why. Otherwise it stays on the route through the seed.)
        connect_directly(self, s.setup.node_id, w.grid_master_node_id, s.grid_master, w.grid_master_address);
        spdlog::info("node {:016x}: welcomed into cluster epoch {}", s.setup.node_id, s.epoch);
        conclude(self, JoinResult::welcomed, "");
        self->send(self, tick_atom::value);
      },
      [self](const Reject& r) {
        if (r.node_id == self->state.setup.node_id) conclude(self, JoinResult::rejected, r.reason);
      },
      [self](const Join& join) {
        // We are the joiner's seed: the GridMaster decides, and answers the joiner itself.
        auto& s = self->state;
        if (s.grid_master)
          self->send(s.grid_master, join);
        else if (join.node)
          self->send(join.node, Reject{join.node_id, "the seed is not a member of a cluster"});
      },
      [self](GridState& grid) {
        auto& s = self->state;
        if (!s.grid || std::tie(grid.epoch, grid.layout_version) > std::tie(s.grid->epoch, s.grid->layout_version))
          s.grid = std::move(grid);
      },
      [self](tick_atom) {
        auto& s = self->state;
        if (!s.grid_master || s.leaving) return;
        collect_dims(self, [self](std::vector<DimensionStats> dims) {
          if (self->state.grid_master) self->send(self->state.grid_master, make_report(self, dims));
        });
        self->delayed_send(self, s.setup.report_interval, tick_atom::value);
      },
      [self](stats_atom) {
        auto promise = self->make_response_promise<NodeStats>();
        collect_dims(self, [self, promise](std::vector<DimensionStats> dims) mutable {
          auto& s = self->state;
          std::uint64_t bad = s.bad_messages;
          for (const auto& d : dims) bad += d.rounds.malformed;
          promise.deliver(
              NodeStats{s.setup.node_id, s.outcome.result == JoinResult::welcomed && !s.leaving, std::move(dims), bad});
        });
        return promise;
      },
      [self](grid_view_atom) -> caf::result<caf::message> {
        if (!self->state.grid_master) return caf::make_error(caf::sec::request_receiver_down, "not in a cluster");
        return self->delegate(self->state.grid_master, grid_view_atom::value);
      },
      [self](outcome_atom) -> caf::result<JoinOutcome> {
        auto& s = self->state;
        if (s.outcome.result != JoinResult::pending) return s.outcome;
        auto promise = self->make_response_promise<JoinOutcome>();
        s.outcome_waiters.push_back(promise);
        return promise;
      },
      [self](warm_params_atom) -> std::tuple<std::uint64_t, FloatPayload> {
        // A joining node's warm start: our model now, read under the tensor locks.
        const auto& store = self->state.setup.store;
        FloatPayload payload;
        payload.values.resize(store->size());
        store->fetch(payload.values);
        return {store->signature(), std::move(payload)};
      },
      [self](allow_rounds_atom, std::uint32_t dim, std::uint64_t rounds) {
        if (dim < kDimsOffered) self->send(self->state.line_masters[dim], allow_rounds_atom::value, rounds);
      },
      [self](stop_atom) {
        auto& s = self->state;
        if (s.leaving) return;
        s.leaving = true;
        if (!s.grid_master) {
          conclude(self, JoinResult::stopped, "stopped before the join was answered");
          self->quit(caf::exit_reason::user_shutdown);
          return;
        }
        spdlog::info("node {:016x}: leaving", s.setup.node_id);
        self->request(s.grid_master, std::chrono::seconds(3), Leave{s.setup.node_id, s.epoch})
            .then([self](left_atom) { self->quit(caf::exit_reason::user_shutdown); },
                  [self](caf::error&) { self->quit(caf::exit_reason::user_shutdown); });
      },
  };
}

}  // namespace gridtrain::actors
