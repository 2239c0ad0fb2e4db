#include "actors/grid_master.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "actors/dropped.hpp"
#include "actors/token_proof.hpp"
#include "allreduce/replica_distance.hpp"

namespace gridtrain::actors {

namespace {

using Self = caf::stateful_actor<GridMasterState>*;

// Whether `join` may join, or why not (the reason the joiner prints). The order matters: a stranger learns
// nothing of our model from a join with a bad token.
Status admit(const GridMasterState& s, const Join& join) {
  auto refuse = [](std::string why) { return Error{.message = std::move(why)}; };
  if (join.protocol != protocol_version)
    return refuse("protocol version " + std::to_string(join.protocol) + " differs from the cluster's " +
                  std::to_string(protocol_version));
  if (!token_proof_matches(s.setup.token, join.node_id, join.token_proof)) return refuse("bad cluster token proof");
  if (join.model_signature != s.setup.model_signature || join.model_floats != s.setup.model_floats)
    return refuse(fmt::format("a different model: signature {:016x} with {} floats, the cluster trains {:016x} "
                              "with {}",
                              join.model_signature, join.model_floats, s.setup.model_signature, s.setup.model_floats));
  if (join.node_id == 0 || join.node_id == grid::kNoNode) return refuse("invalid node id");
  if (s.members.count(join.node_id))
    return refuse(fmt::format("node id {:016x} is already in the cluster", join.node_id));
  auto all_set = [](const std::vector<caf::actor>& v) {
    return v.size() == kDimsOffered && std::all_of(v.begin(), v.end(), [](const caf::actor& a) { return bool(a); });
  };
  if (!all_set(join.dimension_nodes) || !all_set(join.line_masters))
    return refuse("malformed join: expected " + std::to_string(kDimsOffered) + " dimension nodes and line masters");
  return {};
}

// Tells the lines what the delta changed: every stop before any start (LayoutDelta's contract).
void apply(Self self, const grid::LayoutDelta& delta) {
  auto& s = self->state;
  for (const auto& [id, old_master] : delta.stopped) {
    auto m = s.members.find(old_master);
    if (m == s.members.end()) continue;  // it left, or died
    self->send(m->second.line_masters[static_cast<std::size_t>(id.dim)],
               StopLine{s.epoch, s.layout_version, static_cast<std::uint32_t>(id.dim), id.index});
  }
  for (const grid::LineState& line : delta.started) {
    StartLine start{s.epoch, s.layout_version, static_cast<std::uint32_t>(line.id.dim), line.id.index, {},
                    s.settings, {}};
    const auto dim = static_cast<std::size_t>(line.id.dim);
    for (grid::NodeId id : line.members) {
      const auto& m = s.members.at(id);
      start.peers.push_back({id, m.dimension_nodes[dim], m.address});
    }
    self->send(s.members.at(line.master).line_masters[dim], std::move(start));
  }
}

}  // namespace

GridState grid_state(const GridMasterState& s) {
  GridState g{s.epoch, s.layout_version, static_cast<std::uint32_t>(s.layout.dims()), {}, {},
              layout_state(s.layout.snapshot()), s.setup.node_id};
  for (int side : s.layout.shape()) g.shape.push_back(side);
  for (const auto& [id, m] : s.members) {
    MemberState ms{{id, m.address, {}, {}}, m.node, m.dimension_nodes, m.line_masters};
    if (s.layout.contains(id)) {
      for (int x : s.layout.coords(id)) ms.place.coords.push_back(x);
      for (int d = 0; d < s.layout.dims(); ++d)
        if (s.layout.line(s.layout.line_of(id, d)).master == id)
          ms.place.masters.push_back(static_cast<std::uint32_t>(d));
    }
    g.members.push_back(std::move(ms));
  }
  return g;
}

namespace {

// Every node told the grid's state (for status and failover).
void push_state(Self self) {
  auto& s = self->state;
  auto state = caf::make_message(grid_state(s));
  for (const auto& [id, m] : s.members) self->send(m.node, state);
}

// After every change: a new layout version, the lines told, and every node told.
void changed(Self self, const grid::LayoutDelta& delta) {
  ++self->state.layout_version;
  apply(self, delta);
  push_state(self);
}

void remove(Self self, std::uint64_t id, const char* why) {
  auto& s = self->state;
  auto m = s.members.find(id);
  if (m == s.members.end()) return;
  self->demonitor(m->second.node);
  const grid::LayoutDelta delta = s.layout.remove(id);
  ++s.layout_version;
  // The lines first, while the member's handles are still known: the lines it mastered get their StopLine even if
  // it is still alive (stalled past the connection timeout, say), so that its LineMasters stop driving them.
  apply(self, delta);
  self->send(m->second.node, Removed{id, s.epoch, s.layout_version});
  s.members.erase(m);
  push_state(self);
  spdlog::info("grid_master: node {:016x} {}; {} members, layout version {}", id, why, s.members.size(),
               s.layout_version);
}

GridView grid_view(const GridMasterState& s) {
  GridState g = grid_state(s);
  GridView out{g.epoch, g.layout_version, g.dims, g.shape, {}};
  std::vector<const std::vector<float>*> samples;
  for (MemberState& ms : g.members) {
    const auto& report = s.members.at(ms.place.node_id).report;
    out.nodes.push_back(NodeView{std::move(ms.place), report ? report->figures : NodeFigures{}});
    samples.push_back(report ? &report->sample.values : nullptr);
  }
  const std::vector<double> distance = allreduce::replica_distances(samples, s.setup.model_floats);
  for (std::size_t i = 0; i < out.nodes.size(); ++i) out.nodes[i].param_distance = distance[i];
  return out;
}

}  // namespace

LineSettings line_settings(const config::Config& config, std::uint64_t model_floats) {
  return {model_floats, static_cast<std::uint32_t>(config.grid.rounds_in_flight), config.allreduce};
}

caf::behavior grid_master(caf::stateful_actor<GridMasterState>* self, GridMasterSetup setup) {
  auto& s = self->state;
  s.setup = std::move(setup);
  s.settings = line_settings(s.setup.config, s.setup.model_floats);
  s.layout = s.setup.config.grid.dims ? grid::Layout::fixed(*s.setup.config.grid.dims)
                                      : grid::Layout::automatic(s.setup.config.grid.max_line);
  drop_unexpected(self);
  self->set_down_handler([self](caf::down_msg& down) {
    auto& s = self->state;
    for (const auto& [id, m] : s.members) {
      if (m.node.address() == down.source) {
        remove(self, id, "is unreachable: its connection was lost (crashed, stalled or cut off)");
        return;
      }
    }
  });
  return {
      [self](const Join& join) {
        auto& s = self->state;
        if (!join.node) {
          log_dropped("grid_master", s.bad_messages, "a join without a node handle");
          return;
        }
        if (Status admitted = admit(s, join); !admitted.ok()) {
          const std::string& why = admitted.error().message;
          ++s.rejected;
          spdlog::warn("grid_master: rejected node {:016x} at {}: {}", join.node_id, join.address, why);
          self->send(join.node, Reject{join.node_id, why});
          return;
        }
        s.members.emplace(join.node_id, GridMasterState::Member{join.address, join.node, join.dimension_nodes,
                                                                join.line_masters, {}});
        self->monitor(join.node);
        const grid::LayoutDelta delta = s.layout.add(join.node_id);
        // The lines first, then the welcome: whoever hears of the welcome finds the lines already told.
        changed(self, delta);
        self->send(join.node, Welcome{join.node_id, s.epoch, config::to_yaml(s.setup.config),
                                      caf::actor_cast<caf::actor>(self), s.setup.address, s.setup.node_id});
        spdlog::info("grid_master: node {:016x} at {} joined; {} members, layout version {}", join.node_id,
                     join.address, s.members.size(), s.layout_version);
      },
      [self](const Leave& leave) {
        if (leave.epoch == self->state.epoch) remove(self, leave.node_id, "left");
        return left_atom::value;
      },
      [self](NodeReport& report) {
        auto& s = self->state;
        auto m = s.members.find(report.node_id);
        if (m == s.members.end()) return;  // it left; the report was on its way
        if (report.sample.values.size() > allreduce::kMaxReplicaSample) {
          log_dropped("grid_master", s.bad_messages, "a node report with an oversized sample");
          return;
        }
        m->second.report = std::move(report);
      },
      [self](grid_view_atom) { return grid_view(self->state); },
  };
}

}  // namespace gridtrain::actors
