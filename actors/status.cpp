#include "actors/status.hpp"

#include <caf/io/middleman.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <set>

namespace gridtrain::actors {

std::vector<std::size_t> report_sample_indices(std::size_t model_floats) {
  const std::size_t m = std::min(model_floats, max_report_sample);
  std::vector<std::size_t> out(m);
  for (std::size_t j = 0; j < m; ++j) out[j] = j * model_floats / m;
  return out;
}

std::vector<double> param_distances(const std::vector<const std::vector<float>*>& samples, std::uint64_t model_floats) {
  const std::size_t m = std::min<std::uint64_t>(model_floats, max_report_sample);
  std::vector<double> out(samples.size(), -1);
  std::vector<double> mean(m, 0.0);
  std::size_t reporting = 0;
  for (const auto* s : samples) {
    if (!s || s->size() != m) continue;
    ++reporting;
    for (std::size_t j = 0; j < m; ++j) mean[j] += (*s)[j];
  }
  if (reporting == 0 || m == 0) return out;
  for (double& x : mean) x /= static_cast<double>(reporting);
  const double scale = static_cast<double>(model_floats) / static_cast<double>(m);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto* s = samples[i];
    if (!s || s->size() != m) continue;
    double sum = 0;
    for (std::size_t j = 0; j < m; ++j) sum += ((*s)[j] - mean[j]) * ((*s)[j] - mean[j]);
    out[i] = std::sqrt(scale * sum);
  }
  return out;
}

std::string to_json(const ClusterStatus& status) {
  using nlohmann::json;
  json nodes = json::array();
  for (const NodeStatus& n : status.nodes) {
    nodes.push_back({{"id", n.id},
                     {"id_hex", fmt::format("{:016x}", n.id)},
                     {"address", n.address},
                     {"coords", n.coords},
                     {"masters", n.masters},
                     {"rounds_done", n.rounds_done},
                     {"param_mean", n.param_mean},
                     {"param_l2", n.param_l2},
                     {"samples", n.samples},
                     {"test_accuracy", n.test_accuracy},
                     {"param_distance", n.param_distance < 0 ? json(nullptr) : json(n.param_distance)},
                     {"stale_dropped", n.stale_dropped},
                     {"quorum_shortfalls", n.quorum_shortfalls}});
  }
  json out = {{"epoch", status.epoch},
              {"layout_version", status.layout_version},
              {"dims", status.dims},
              {"shape", status.shape},
              {"nodes", std::move(nodes)}};
  return out.dump();
}

namespace {

template <class T>
std::string joined(const std::vector<T>& v, const char* sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + std::to_string(v[i]);
  return out;
}

}  // namespace

std::string to_table(const ClusterStatus& status) {
  std::string out = fmt::format("epoch {}  layout version {}  dims {}  shape {}  nodes {}\n", status.epoch,
                                status.layout_version, status.dims, joined(status.shape, "x"), status.nodes.size());
  out += fmt::format("{:<16}  {:<21}  {:<10}  {:<7}  {:>8}  {:>12}  {:>12}  {:>10}  {:>9}  {:>8}\n", "ID", "ADDRESS",
                     "COORDS", "MASTERS", "ROUNDS", "PARAM_MEAN", "PARAM_L2", "DISTANCE", "SAMPLES", "ACCURACY");
  for (const NodeStatus& n : status.nodes) {
    const std::string distance = n.param_distance < 0 ? "-" : fmt::format("{:.3g}", n.param_distance);
    const std::string accuracy = n.test_accuracy < 0 ? "-" : fmt::format("{:.4f}", n.test_accuracy);
    const std::string masters = n.masters.empty() ? "-" : joined(n.masters, ",");
    out += fmt::format("{:016x}  {:<21}  {:<10}  {:<7}  {:>8}  {:>12.6g}  {:>12.6g}  {:>10}  {:>9}  {:>8}\n", n.id,
                       n.address, "(" + joined(n.coords, ",") + ")", masters, n.rounds_done, n.param_mean,
                       n.param_l2, distance, n.samples, accuracy);
  }
  return out;
}

config::Result<ClusterStatus> query_status(caf::actor_system& system, const caf::actor& node,
                                           std::chrono::milliseconds timeout) {
  caf::scoped_actor self{system};
  std::optional<ClusterStatus> result;
  std::string failure = "no answer";
  self->request(node, timeout, status_atom::value)
      .receive([&](ClusterStatus& status) { result = std::move(status); },
               [&](caf::error& e) { failure = system.render(e); });
  if (result) return std::move(*result);
  return config::Error{.source = "status", .message = "no status from the node: " + failure};
}

config::Result<ClusterStatus> query_status(caf::actor_system& system, const config::Endpoint& endpoint,
                                           std::chrono::milliseconds timeout) {
  caf::scoped_actor self{system};
  caf::actor node;
  std::string failure = "no answer";
  self->request(system.middleman().actor_handle(), timeout, caf::connect_atom::value, endpoint.host, endpoint.port)
      .receive([&](caf::node_id&, caf::strong_actor_ptr& ptr,
                   std::set<std::string>&) { node = caf::actor_cast<caf::actor>(ptr); },
               [&](caf::error& e) { failure = system.render(e); });
  if (!node)
    return config::Error{.source = endpoint.to_string(), .message = "cannot reach the node: " + failure};
  return query_status(system, node, timeout);
}

}  // namespace gridtrain::actors
