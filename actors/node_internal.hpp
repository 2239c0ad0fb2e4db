#pragma once
// The Node's internals, shared by the files that implement it: its phases' behaviours and the moves between them
// (node.cpp), joining and seeds (node_join.cpp), losing the cluster, the rejoin walks and the election
// (node_failover.cpp), the reports to the GridMaster (node_report.cpp) and warm starts (node_warm_start.cpp).
// Not part of the Node's interface: only actors/node*.cpp include it.

#include <caf/all.hpp>
#include <caf/io/middleman_actor.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/gate.hpp"
#include "actors/grid_master.hpp"
#include "actors/node.hpp"
#include "base/result.hpp"

namespace gridtrain::actors::node_internal {

using Self = caf::stateful_actor<NodeState>*;

// Every dial of this node passes the peer's gate with its token (actors/gate.hpp).
inline caf::io::middleman_actor middleman(Self self) {
  return gate_middleman(self->system(), self->state.setup.credentials);
}

// What a node that is no member answers a Join it cannot pass on.
inline constexpr const char* kNotAMember = "the seed is not a member of a cluster";

// Phase changes (node.cpp). The node lost the cluster (node.hpp): member -> rejoining; it drops its lines unless
// `keep_lines`, then walks the members.
// `grid_master_ended`: it knows the GridMaster ended (it stepped down, or it ran in this process), so no lease
// of it holds; otherwise the node waits out the lease before it votes or stands.
void lose_cluster(Self self, const std::string& why, bool keep_lines, bool grid_master_ended = false,
                  bool warn = true);

// Joining and seeds (node_join.cpp).
Join make_join(Self self, std::uint64_t request, std::uint64_t nonce, bool vote);
void send_join(Self self, const caf::actor& to, bool vote = false);
void watch_join_holder(Self self, const caf::actor& holder, std::string name);
void forget_join_holder(Self self);
void pass_on_join(Self self, const caf::actor& to, const Join& join);
void answer_passed_joins(Self self);
void conclude(Self self, JoinResult result, std::string reason);
std::string seed_name(const NodeState& s, std::size_t i);
void ask_next_seed(Self self, const std::string& why_not_the_last);
std::shared_ptr<dataplane::Endpoint> add_own_endpoint(Self self);
void begin(Self self, std::string address);
caf::actor spawn_grid_master(Self self, GridMasterSetup setup);
GridMasterSetup grid_master_setup(Self self, const config::Config& config, std::optional<GridState> takeover);

// Lines, the rejoin walks and the election (node_failover.cpp).
// lost_atom to its DimensionNodes and LineMasters (they pass it on to the data plane): every line, or with (epoch,
// layout_version) those older than that.
template <class... Version>
void drop_lines(Self self, Version... version) {
  for (const auto& d : self->state.dimension_nodes) self->send(d, lost_atom::value, version...);
  for (const auto& m : self->state.line_masters) self->send(m, lost_atom::value, version...);
}
void end_lines_outside(Self self, const GridState& grid);
void abandon_candidacy(Self self, const std::string& why);
void release_early_votes(Self self, const caf::actor& to);
void start_walk(Self self);
// After a lost connection to the GridMaster: asks in the background whether anything listens at its node's
// address; lease_probed() gets the answer (lease_probe_atom).
void probe_lost_grid_master(Self self);
// Whether the lease of the GridMaster it lost has run out (NodeState::may_vote_at): then it may vote, or stand.
bool may_vote(Self self);
void lease_probed(Self self, std::uint64_t generation, bool nothing_listens);
void walk_step(Self self, std::uint64_t token);

// Reports to the GridMaster (node_report.cpp).
std::chrono::milliseconds silence_limit(const config::Config& config);
std::chrono::milliseconds grid_master_lease(const config::Config& config);
std::chrono::milliseconds lease_wait(const config::Config& config);
void collect_dims(Self self, std::function<void(std::vector<DimensionStats>)> done);
void report(Self self, std::uint64_t generation);
void send_reports(Self self, std::uint64_t generation);

// Warm starts (node_warm_start.cpp).
void warm_start(Self self, std::function<void(Result<std::uint64_t>)> done);
void warm_start_peer_died(Self self, const caf::actor_addr& source);
void warm_start_on_rejoin(Self self);
caf::result<std::uint64_t, std::uint64_t, FloatPayload> warm_params(Self self, std::uint64_t offset,
                                                                    std::uint64_t count);

}  // namespace gridtrain::actors::node_internal
