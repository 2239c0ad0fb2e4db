#include "telemetry/grid_view_text.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace gridtrain::telemetry {

std::string grid_view_json(const actors::GridView& view) {
  using nlohmann::json;
  json nodes = json::array();
  for (const actors::NodeView& n : view.nodes) {
    const actors::NodeFigures& f = n.figures;
    nodes.push_back({{"id", n.place.node_id},
                     {"id_hex", fmt::format("{:016x}", n.place.node_id)},
                     {"address", n.place.address},
                     {"coords", n.place.coords},
                     {"masters", n.place.masters},
                     {"rounds_done", f.rounds_done},
                     {"param_mean", f.param_mean},
                     {"param_l2", f.param_l2},
                     {"samples", f.samples},
                     {"test_accuracy", f.test_accuracy},
                     {"param_distance", n.param_distance < 0 ? json(nullptr) : json(n.param_distance)},
                     {"stale_dropped", f.stale_dropped},
                     {"quorum_shortfalls", f.quorum_shortfalls}});
  }
  json out = {{"epoch", view.epoch},
              {"layout_version", view.layout_version},
              {"dims", view.dims},
              {"shape", view.shape},
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

std::string grid_view_table(const actors::GridView& view) {
  std::string out = fmt::format("epoch {}  layout version {}  dims {}  shape {}  nodes {}\n", view.epoch,
                                view.layout_version, view.dims, joined(view.shape, "x"), view.nodes.size());
  out += fmt::format("{:<16}  {:<21}  {:<10}  {:<7}  {:>8}  {:>12}  {:>12}  {:>10}  {:>9}  {:>8}\n", "ID", "ADDRESS",
                     "COORDS", "MASTERS", "ROUNDS", "PARAM_MEAN", "PARAM_L2", "DISTANCE", "SAMPLES", "ACCURACY");
  for (const actors::NodeView& n : view.nodes) {
    const actors::NodeFigures& f = n.figures;
    const std::string distance = n.param_distance < 0 ? "-" : fmt::format("{:.3g}", n.param_distance);
    const std::string accuracy = f.test_accuracy < 0 ? "-" : fmt::format("{:.4f}", f.test_accuracy);
    const std::string masters = n.place.masters.empty() ? "-" : joined(n.place.masters, ",");
    out += fmt::format("{:016x}  {:<21}  {:<10}  {:<7}  {:>8}  {:>12.6g}  {:>12.6g}  {:>10}  {:>9}  {:>8}\n",
                       n.place.node_id, n.place.address, "(" + joined(n.place.coords, ",") + ")", masters,
                       f.rounds_done, f.param_mean, f.param_l2, distance, f.samples, accuracy);
  }
  return out;
}

}  // namespace gridtrain::telemetry
