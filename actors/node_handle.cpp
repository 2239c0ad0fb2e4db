#include "actors/node_handle.hpp"

#include <caf/io/middleman.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <thread>
#include <set>

#include "actors/dimension_node.hpp"
#include "actors/gate.hpp"
#include "actors/node.hpp"
#include "actors/token_proof.hpp"
#include "grid/layout.hpp"
#include "learner/probe.hpp"

namespace gridtrain::actors {

NodeHandle::NodeHandle(caf::actor_system& system, caf::actor node, std::uint64_t id, std::uint16_t port,
                       std::string address, std::shared_ptr<learner::ParameterStore> store,
                       std::shared_future<JoinOutcome> outcome, std::shared_ptr<const Gate> gate,
                       std::shared_ptr<const DataCounters> data_counters, std::shared_ptr<RoundAllowance> allowance)
    : system_(&system), node_(std::move(node)), id_(id), port_(port), address_(std::move(address)),
      store_(std::move(store)), outcome_(std::move(outcome)), gate_(std::move(gate)),
      data_counters_(std::move(data_counters)), allowance_(std::move(allowance)) {
  // One attachable for the node's whole life, set when it ends (at once if it has ended already). wait_for() is
  // called ten times a second for as long as a node runs; a monitor per call would leave one attachable (and the
  // scoped actor it names) on the node actor each time, which CAF frees only when the node ends: about 590 bytes
  // a call, 21 MB an hour, seen as a node's resident memory growing for hours.
  auto ended = std::make_shared<std::promise<void>>();
  ended_ = ended->get_future().share();
  node_->attach_functor([ended](const caf::error&) { ended->set_value(); });
}

JoinOutcome NodeHandle::wait_joined() const {
  try {
    return outcome_.get();
  } catch (const std::future_error&) {
    return {JoinResult::stopped, "the node ended before its join was decided"};
  }
}

void NodeHandle::stop() const { caf::anon_send(node_, stop_atom::value); }

void NodeHandle::kill() const { caf::anon_send_exit(node_, caf::exit_reason::kill); }

void NodeHandle::wait() const { ended_.wait(); }

bool NodeHandle::wait_for(std::chrono::milliseconds timeout) const {
  return ended_.wait_for(timeout) == std::future_status::ready;
}

std::uint64_t rounds_done(const DataCounters& counters) {
  std::uint64_t rounds = 0;
  for (const auto& c : counters) rounds += c.rounds_done.load(std::memory_order_relaxed);
  return rounds;
}

bool averaging(const DataCounters& counters) {
  return std::any_of(counters.begin(), counters.end(),
                     [](const auto& c) { return c.line_peers.load(std::memory_order_relaxed) >= 2; });
}

NodeStats NodeHandle::stats() const {
  caf::scoped_actor self{*system_};
  NodeStats stats;
  self->request(node_, std::chrono::seconds(10), stats_atom::value)
      .receive([&](NodeStats& x) { stats = std::move(x); }, [](caf::error&) {});
  if (gate_) stats.gate = gate_->counters().snapshot();
  return stats;
}

void NodeHandle::allow_rounds(std::uint64_t rounds) const {
  if (!allowance_) return;
  if (const std::uint8_t waiting = allowance_->grant(rounds)) caf::anon_send(node_, allow_rounds_atom::value, waiting);
}

Result<std::vector<std::uint64_t>> NodeHandle::members(std::chrono::milliseconds timeout) const {
  caf::scoped_actor self{*system_};
  std::optional<std::vector<std::uint64_t>> ids;
  std::string failure = "no answer";
  self->request(node_, timeout, members_atom::value)
      .receive([&](std::vector<std::uint64_t>& x) { ids = std::move(x); },
               [&](caf::error& e) { failure = system_->render(e); });
  if (ids) return std::move(*ids);
  return Error{.message = "the node did not say its cluster's members: " + failure};
}

Result<GridView> NodeHandle::grid_view(std::chrono::milliseconds timeout) const {
  return query_grid_view(*system_, node_, timeout);
}

Result<std::optional<std::uint64_t>> NodeHandle::warm_start() const {
  // The node copies through the handles its GridState carries, over the connections it already has: dialing the
  // member's address from here could give the pair a second connection (see reach() in node_failover.cpp).
  caf::scoped_actor self{*system_};
  Result<std::optional<std::uint64_t>> result = Error{.message = "warm start: no answer from the node"};
  self->request(node_, std::chrono::seconds(60), warm_start_atom::value)
      .receive(
          [&](std::uint64_t from) {
            result = from == 0 ? std::optional<std::uint64_t>() : std::optional<std::uint64_t>(from);
          },
          [&](const caf::error& e) { result = Error{.message = system_->render(e)}; });
  return result;
}

namespace {

std::uint64_t random_node_id() {
  std::random_device device;
  std::mt19937_64 bits((std::uint64_t{device()} << 32) ^ device());
  for (;;) {
    const std::uint64_t id = bits();
    if (id != 0 && id != grid::kNoNode) return id;
  }
}

}  // namespace

Result<NodeHandle> start_node(caf::actor_system& system, NodeOptions options) {
  auto credentials = load_credentials(options.config.cluster);
  if (!credentials) return credentials.error();
  const std::uint64_t id = options.node_id != 0 ? options.node_id : random_node_id();
  if (!options.store) {
    if (options.config.learner.kind != config::LearnerKind::probe)
      return Error{.key = "learner.kind",
                           .message = "learner.kind model needs the learner's ParameterStore, and none was given"};
    options.store = learner::make_probe_store(options.config.learner, id);
  }
  if (!options.data_plane) {
    auto opened = start_data_plane(options.config, options.listen);
    if (!opened) return opened.error();
    options.data_plane = std::move(opened).value();
  }
  auto outcome = std::make_shared<std::promise<JoinOutcome>>();
  std::shared_future<JoinOutcome> decided = outcome->get_future().share();
  auto data_routes = std::make_shared<std::vector<caf::actor>>();
  auto data =
      options.data_plane->add_endpoint(endpoint_setup(id, options.store, credentials.value().token, data_routes));
  auto counters = data->shared_counters();
  auto allowance = options.paced_by_every_steps ? std::make_shared<RoundAllowance>() : nullptr;
  NodeSetup setup{.config = options.config,
                  .node_id = id,
                  .credentials = credentials.value(),
                  .store = options.store,
                  .data_plane = options.data_plane,
                  .data = std::move(data),
                  .data_routes = std::move(data_routes),
                  .seed_node = options.seed_node,
                  .seeds = options.seeds,
                  .report_interval = options.report_interval,
                  .join_timeout = options.join_timeout,
                  .rejoin_interval = options.rejoin_interval,
                  .allowance = allowance,
                  .grid_master_thread = options.grid_master_thread,
                  .outcome = std::move(outcome),
                  .progress = options.progress};
  caf::actor actor = system.spawn(node, std::move(setup));
  std::uint16_t port = 0;
  std::string address = fmt::format("local:{:016x}", id);
  std::shared_ptr<Gate> open_gate;
  if (options.listen) {
    const config::HostPort& listen = options.config.cluster.listen;
    // Through the gate: CAF opens no port of its own (actors/gate.hpp).
    auto gate = Gate::open(system, listen, credentials.value(), actor);
    if (!gate) {
      caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
      return gate.error();
    }
    port = gate.value()->port();
    // The gate closes when the node ends.
    open_gate = std::move(gate).value();
    caf::actor_cast<caf::abstract_actor*>(actor)->attach_functor([open_gate] {});
    address = config::HostPort{listen.host, port}.to_string();
  }
  caf::anon_send(actor, begin_atom::value, address);
  return NodeHandle{system,           std::move(actor),   id, port, std::move(address), std::move(options.store),
                    std::move(decided), std::move(open_gate), std::move(counters), std::move(allowance)};
}

Result<std::shared_ptr<dataplane::Service>> start_data_plane(const config::Config& config, bool listen) {
  auto credentials = load_credentials(config.cluster);
  if (!credentials) return credentials.error();
  dataplane::ServiceOptions options;
  options.tls = credentials.value().tls;
  options.host = config.cluster.listen.host;
  options.port = static_cast<std::uint16_t>(config.cluster.data_port);
  options.socket_buffer_bytes = config.cluster.socket_buffer_kb * 1024;
  options.streams = static_cast<std::uint16_t>(config.cluster.data_streams);
  options.listen = listen;
  auto service = dataplane::Service::start(options);
  if (!service) {
    Error e = service.error();
    e.key = "cluster.data_port";
    return e;
  }
  return service;
}

Result<GridView> query_grid_view(caf::actor_system& system, const caf::actor& node,
                                 std::chrono::milliseconds timeout) {
  caf::scoped_actor self{system};
  std::optional<GridView> result;
  std::string failure = "no answer";
  self->request(node, timeout, grid_view_atom::value)
      .receive([&](GridView& view) { result = std::move(view); },
               [&](caf::error& e) { failure = system.render(e); });
  if (result) return std::move(*result);
  return Error{.message = "no grid view from the node: " + failure};
}

Result<GridView> query_grid_view(caf::actor_system& system, const config::HostPort& endpoint,
                                 const Credentials& credentials, std::chrono::milliseconds timeout) {
  caf::scoped_actor self{system};
  caf::actor node;
  std::string failure = "no answer";
  // The dial waits past the gate's own handshake limit, so that a port that accepts and never answers (another
  // service: the metrics port, a web server) gets the gate's reason ("did not answer the gate handshake"), not a
  // bare request_timeout of the same 5 s.
  const auto dial_timeout =
      std::max<std::chrono::milliseconds>(timeout, kGateHandshakeTimeout + std::chrono::seconds(1));
  // A gate that answers busy (a flood of connections, many nodes at once), or a dial that timed out there, may get
  // through in a moment: asked again after 200 ms, 400, 800 and 1,600 (3 s in all) before its answer is the failure.
  // Not past the dial's own limit: a port that never answers is not asked four times more.
  constexpr int kRetries = 4;
  const auto give_up = std::chrono::steady_clock::now() + dial_timeout;
  for (int attempt = 0;; ++attempt) {
    bool again = false;
    self->request(gate_middleman(system, credentials), dial_timeout, caf::connect_atom::value, endpoint.host,
                  endpoint.port)
        .receive([&](caf::node_id&, caf::strong_actor_ptr& ptr,
                     std::set<std::string>&) { node = caf::actor_cast<caf::actor>(ptr); },
                 [&](caf::error& e) {
                   failure = system.render(e);
                   again = may_let_in_later(e);
                 });
    const auto pause = std::chrono::milliseconds(200) * (1 << attempt);
    if (node || !again || attempt == kRetries || std::chrono::steady_clock::now() + pause > give_up) break;
    std::this_thread::sleep_for(pause);
  }
  if (!node) return Error{.source = endpoint.to_string(), .message = "cannot reach the node: " + failure};
  return query_grid_view(system, node, timeout);
}

}  // namespace gridtrain::actors
