#include "telemetry/grid_view_text.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <map>

namespace gridtrain::telemetry {

std::vector<std::size_t> line_peer_counts(const actors::GridView& view) {
  // Two members share at most one line (their coords differ in exactly one place), so a member's peers are the
  // other members of its lines, summed over dimensions. The coords with one coordinate blanked name a line.
  std::vector<std::size_t> peers(view.nodes.size(), 0);
  for (std::uint32_t dim = 0; dim < view.dims; ++dim) {
    std::map<std::vector<std::int32_t>, std::vector<std::size_t>> lines;
    for (std::size_t i = 0; i < view.nodes.size(); ++i) {
      std::vector<std::int32_t> key = view.nodes[i].place.coords;
      if (key.size() != view.dims) continue;  // not placed: on no line
      key[dim] = -1;
      lines[std::move(key)].push_back(i);
    }
    for (const auto& [key, members] : lines)
      for (std::size_t i : members) peers[i] += members.size() - 1;
  }
  return peers;
}

namespace {

// The warnings, given line_peer_counts(view): the JSON and the table count the peers once for both uses.
std::vector<std::string> warnings(const actors::GridView& view, const std::vector<std::size_t>& peers) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < view.nodes.size(); ++i) {
    if (peers[i] > 0) continue;
    const actors::Placement& p = view.nodes[i].place;
    const char* why = view.nodes.size() == 1 ? "it is the only member"
                      : p.coords.empty()     ? "it has no place in the grid yet"
                                             : "no other member shares any of its lines";
    out.push_back(fmt::format("node {:016x} ({}) averages with nobody: {}", p.node_id, p.address, why));
  }
  return out;
}

}  // namespace

std::vector<std::string> grid_view_warnings(const actors::GridView& view) {
  return warnings(view, line_peer_counts(view));
}

std::string grid_view_json(const actors::GridView& view) {
  using nlohmann::json;
  json nodes = json::array();
  const auto peers = line_peer_counts(view);
  for (std::size_t i = 0; i < view.nodes.size(); ++i) {
    const actors::NodeView& n = view.nodes[i];
    const actors::NodeFigures& f = n.figures;
    nodes.push_back({{"id", n.place.node_id},
                     {"id_hex", fmt::format("{:016x}", n.place.node_id)},
                     {"address", n.place.address},
                     {"coords", n.place.coords},
                     {"masters", n.place.masters},
                     {"line_peers", peers[i]},
                     {"rounds_done", f.rounds_done},
                     {"param_mean", f.param_mean},
                     {"param_l2", f.param_l2},
                     {"samples", f.samples},
                     {"test_accuracy", f.test_accuracy},
                     {"epochs_done", f.epochs_done},
                     {"param_distance", n.param_distance < 0 ? json(nullptr) : json(n.param_distance)},
                     {"stale_dropped", f.stale_dropped},
                     {"quorum_shortfalls", f.quorum_shortfalls}});
  }
  json out = {{"epoch", view.epoch},
              {"layout_version", view.layout_version},
              {"dims", view.dims},
              {"shape", view.shape},
              {"grid_master", view.grid_master_node},
              {"nodes", std::move(nodes)},
              {"warnings", warnings(view, peers)}};
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

std::string grid_view_table(const actors::GridView& view) {
  std::string out = fmt::format("epoch {}  layout version {}  dims {}  shape {}  nodes {}  grid master {:016x}\n",
                                view.epoch, view.layout_version, view.dims, joined(view.shape, "x"),
                                view.nodes.size(), view.grid_master_node);
  out += fmt::format("{:<16}  {:<21}  {:<10}  {:<7}  {:>5}  {:>8}  {:>12}  {:>12}  {:>10}  {:>9}  {:>8}\n", "ID",
                     "ADDRESS", "COORDS", "MASTERS", "PEERS", "ROUNDS", "PARAM_MEAN", "PARAM_L2", "DISTANCE", "SAMPLES",
                     "ACCURACY");
  const auto peers = line_peer_counts(view);
  for (std::size_t i = 0; i < view.nodes.size(); ++i) {
    const actors::NodeView& n = view.nodes[i];
    const actors::NodeFigures& f = n.figures;
    const std::string distance = n.param_distance < 0 ? "-" : fmt::format("{:.3g}", n.param_distance);
    const std::string accuracy = f.test_accuracy < 0 ? "-" : fmt::format("{:.4f}", f.test_accuracy);
    const std::string masters = n.place.masters.empty() ? "-" : joined(n.place.masters, ",");
    out += fmt::format("{:016x}  {:<21}  {:<10}  {:<7}  {:>5}  {:>8}  {:>12.6g}  {:>12.6g}  {:>10}  {:>9}  {:>8}\n",
                       n.place.node_id, n.place.address, "(" + joined(n.place.coords, ",") + ")", masters, peers[i],
                       f.rounds_done, f.param_mean, f.param_l2, distance, f.samples, accuracy);
  }
  for (const std::string& w : warnings(view, peers)) out += "warning: " + w + "\n";
  return out;
}

}  // namespace gridtrain::telemetry
