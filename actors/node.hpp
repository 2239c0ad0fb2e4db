#pragma once
// Node: one member of a cluster. One per gridnode process, or many in one process (tests, the scale
// simulator): nothing here knows which.
//
// It keeps: its id, its ParameterStore, its DimensionNode and LineMaster for each of kDimsOffered dimensions (its
// children), the GridMaster's handle once welcomed, and the last GridState the GridMaster pushed.
// Phases (NodePhase), each a behaviour of its own (the state diagram is in node.cpp): joining -> member -> leaving,
// and member -> rejoining -> member when it loses the cluster.
// Nothing here decides that the GridMaster is dead: a node only knows it lost contact, and a majority decides.
// - Removed (the GridMaster took it out while it is alive): it drops every line (lost_atom to its DimensionNodes
//   and LineMasters) and asks to join again; welcomed, it copies the model of a line peer (warm start).
// - The GridMaster's down_msg (its process died, stalled, or this node is cut off from it): it keeps its lines,
//   which go on averaging wherever their members are alive, and walks the members of its last GridState in
//   ascending id order, one rejoin walk after another. To the lowest member that answers it sends a Join that is
//   a vote (Join::vote): a member of a live cluster passes it to its GridMaster, which lets it back in; a
//   candidate counts it. If no member below it answers, it stands as candidate itself: it spawns a GridMaster
//   that elects (grid_master.hpp) from its last GridState, and keeps walking the members above it, so that a
//   live cluster it was cut off from takes it back. A candidate that finds a lower member, or is welcomed by
//   another GridMaster, abandons (step_down_atom). Welcomed with its place kept (a successor took over), it keeps
//   its model; otherwise it drops the lines it kept and warm-starts.
// It reacts to: begin_atom (join: bootstrap a cluster by spawning its GridMaster, or contact a seed),
// JoinChallenge (the GridMaster's nonce for a Join it sent: it answers with the token proof over it), Welcome or
// Reject, Removed, Join from a node that uses it as its seed (passed on to the GridMaster), stats_atom (its
// DimensionNodes' counters, asked for then), grid_view_atom (answered by the GridMaster), warm_params_atom (its
// model, for a joining node's warm start), allow_rounds_atom (paced by the learner: wakes the LineMasters that wait
// for a grant; actors/round_allowance.hpp), stop_atom (Leave, then end).
// It tells: the GridMaster a NodeReport every report interval, which the GridMaster answers; a member whose
// GridMaster answers none for the silence limit (four connection timeouts) counts it lost, as if its connection had
// closed. A node that lost its GridMaster with the GridMaster perhaps alive (a lost connection, silence) neither
// votes nor stands until the GridMaster's lease has run out (grid_master.hpp, GridMasterSetup::lease), unless the
// GridMaster's node refuses connections: nothing listens there, so its process is gone.
// Its children are linked to it: when it ends, they end, and its data plane endpoint closes.

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/credentials.hpp"
#include "actors/messages.hpp"
#include "actors/round_allowance.hpp"
#include "config/config.hpp"
#include "dataplane/service.hpp"
#include "learner/parameter_store.hpp"
#include "learner/training_progress.hpp"

namespace gridtrain::actors {

struct NodeSetup {
  config::Config config;
  std::uint64_t node_id = 0;
  Credentials credentials;  // the cluster token and TLS identity of the node
  std::shared_ptr<learner::ParameterStore> store;
  // The process's data plane: the node's lines' chunks travel there (its address goes into the Join).
  std::shared_ptr<dataplane::Service> data_plane;
  // This node's endpoint there, opened by start_node so that its NodeHandle reads the rounds' counters directly,
  // with the routes of its round events (filled with the DimensionNodes as they spawn). Null: the node opens its own.
  std::shared_ptr<dataplane::Endpoint> data;
  std::shared_ptr<std::vector<caf::actor>> data_routes;
  caf::actor seed_node;                 // join through this node actor, or else
  std::vector<config::HostPort> seeds;  // through the first of these that is a member, or else bootstrap
  std::chrono::milliseconds report_interval{250};
  std::chrono::milliseconds join_timeout{10000};
  std::chrono::milliseconds rejoin_interval{1000};  // between two rejoin walks; also how long a connect may take
  std::chrono::milliseconds walk_answer_wait{250};   // how long a walk waits for the answer to a Join
  // Paced by the learner (see LineMasterState::every_steps_budget): its grants, shared with the NodeHandle. Null:
  // not paced, rounds back to back.
  std::shared_ptr<RoundAllowance> allowance;
  // The GridMaster this node may host runs on a thread of its own (a detached actor), so that it answers joins and
  // reports at once however busy the scheduler is with rounds: on the shared scheduler, with thousands of
  // in-process nodes running rounds, it got 64 messages per pass through every busy actor, its answers to reports
  // came after the silence limit, and the members elected another. Tests that run actors deterministically
  // (CAF's test scheduler runs no threads) turn it off.
  bool grid_master_thread = true;
  // A GridMaster in this process is taken for one elsewhere: a lost "connection" to it waits out its lease (see
  // lose_cluster). Only for tests whose local stand-ins play remote GridMasters.
  bool lease_for_local_grid_master = false;
  // Set once the join is decided, for threads outside the actor system (NodeHandle::wait_joined). The node may
  // end right after; a request would then find it gone. If the node ends first, the promise is broken.
  std::shared_ptr<std::promise<JoinOutcome>> outcome;
  // The trainer's samples and test accuracy, for the reports; null when the node does not train.
  std::shared_ptr<learner::TrainingProgress> progress;
};

enum class NodePhase { joining, member, rejoining, leaving };

// Joins a node has sent and whose challenge has not come yet, held at most (NodeState::pending_joins).
inline constexpr std::size_t kMaxPendingJoins = 64;
// Joins a seed remembers having passed on (NodeState::passed_joins): the oldest is forgotten.
inline constexpr std::size_t kMaxPassedJoins = 256;

struct NodeState {
  static inline const char* name = "node";
  NodePhase phase = NodePhase::joining;  // the phase whose behaviour the node has (node.cpp)
  std::function<void(const caf::down_msg&)> on_down;  // the phase's part of the down handler; null: none
  NodeSetup setup;
  std::string address;
  std::vector<caf::actor> dimension_nodes;  // kDimsOffered, dimension d at index d
  std::vector<caf::actor> line_masters;
  std::shared_ptr<dataplane::Endpoint> data;  // this node's on the data plane, shared with its DimensionNodes
  // Where the data plane's round events go, by dimension: the DimensionNodes (read on the data plane's thread).
  std::shared_ptr<std::vector<caf::actor>> data_routes = std::make_shared<std::vector<caf::actor>>();
  caf::actor grid_master;  // the cluster's while a member; null otherwise
  std::string grid_master_address;  // advertised host:port of the node hosting it, from the last Welcome
  std::uint64_t epoch = 0;
  JoinOutcome outcome;
  std::vector<caf::typed_response_promise<JoinOutcome>> outcome_waiters;
  // The last GridState the GridMaster sent, kept as the message it came in: a state holds every member, and the
  // nodes of one process (the scale benchmark) then share one copy instead of one each.
  caf::message grid_message;
  const GridState* grid() const { return grid_message.empty() ? nullptr : &grid_message.get_as<GridState>(0); }
  std::optional<config::Config> cluster_config;  // the cluster's, from the last Welcome (a successor runs it)
  // Rejoining: the walk (node id and address of every member of the last GridState in id order, then other
  // addresses it knows with id 0), the next step, whether a member below it answered in this walk, and the step
  // whose timer or connect is awaited (older ones are ignored).
  struct WalkEntry {
    std::uint64_t id = 0;
    std::string address;
    caf::actor node;  // its handle from the last GridState; null for a seed or the GridMaster's address
  };
  std::vector<WalkEntry> walk;
  std::size_t walk_next = 0;
  bool walk_found_lower = false;
  bool walk_voted = false;  // its vote of this walk went out
  std::uint64_t walks = 0;  // walks since it lost the cluster
  std::uint64_t walk_token = 0;
  bool lines_kept = false;  // it lost the GridMaster and kept its lines
  caf::actor voted_for;     // the node its last vote went to
  // Votes that came before this node knew whether it stands: a member that lost the GridMaster a moment before
  // us asks us first. Held (at most kMaxWaitingJoins) until we stand, follow another, or a lower member answers.
  std::vector<Join> early_votes;
  // Members of the last GridState's epoch that left with no GridMaster to take their Leave, and so sent it to every
  // member they knew (node.cpp, tell_members_and_end): a candidacy of this node does not wait for their votes.
  std::vector<std::uint64_t> left_members;
  caf::actor candidate;     // the GridMaster it stands as successor with, while electing
  caf::actor hosted_grid_master;  // the last GridMaster it spawned (a bootstrap's or a candidate's): for its stats
  std::uint64_t rejoins = 0;      // times it lost the cluster and was welcomed back
  std::uint64_t failovers = 0;    // of those, times a successor took over with it in its place
  std::uint64_t warm_starts = 0;  // models copied from a line peer on rejoining
  // The warm starts under way (one, unless a rejoin starts another), by attempt: the member asked (monitored: if
  // it dies, another is asked at once rather than after the request's timeout), the members asked so far, and
  // what to call when it ends. An answer to an attempt already given up finds no entry.
  struct WarmStart {
    caf::actor peer;
    std::vector<std::uint64_t> tried;
    std::function<void(Result<std::uint64_t>)> done;
  };
  std::map<std::uint64_t, WarmStart> warm_start_attempts;
  std::uint64_t warm_start_sequence = 0;
  std::uint64_t report_generation = 0;  // the report timer of an older membership stops itself
  // The model's mean and norm for the reports. They take a pass over the whole model, so the next pass waits
  // kParamStatsCostFactor times as long as this one took: at most 1% of a core whatever the model's size (at every
  // 250 ms report a 64 MB model's pass took 3% of a 2-core machine, a 1 GB model's would read 4 GB/s); the reports
  // in between carry the last values. A small model's pass takes microseconds, so its every report has fresh ones.
  struct ParamStats {
    double mean = 0;
    double l2 = 0;
    std::chrono::steady_clock::time_point due{};
  };
  static constexpr int kParamStatsCostFactor = 100;
  ParamStats param_stats;
  std::uint64_t reports_sent = 0;  // every kRouteCheckEvery-th report also checks the route to the GridMaster
  std::uint64_t grid_master_node_id = 0;  // from the last Welcome
  // The GridMaster's last answer to a report (or the Welcome), and this node's last report tick: see
  // lost_silent_grid_master() in node_report.cpp.
  caf::actor_clock::time_point grid_master_heard;
  caf::actor_clock::time_point last_report_tick;
  // The stamp of the newest answer from the GridMaster, echoed in the next report (its lease; see
  // GridMasterSetup::lease); and, after losing it, when this node may vote or stand: the lease it may still hold
  // has run out by then (see lose_cluster).
  std::int64_t lease_stamp = 0;
  caf::actor_clock::time_point may_vote_at;
  // The Joins it sent whose JoinChallenge has not come yet, by request number, each with whether it was a vote
  // (at most kMaxPendingJoins: the oldest is forgotten, and the walk sends another).
  std::map<std::uint64_t, bool> pending_joins;
  std::uint64_t join_requests = 0;
  std::uint64_t bad_messages = 0;
  std::size_t seed_next = 0;     // joining: the seed to ask next
  std::string seed_failures;     // joining: why the seeds asked so far in this pass did not let it in
  std::string seed_failures_before;  // joining: the same for the pass before, while a new one has none yet
  bool seed_said_retry = false;  // joining: a seed of this pass said "try again" (see ask_next_seed)
  std::uint32_t seed_passes = 0;  // joining: passes over the list so far (the pause between them grows)
  // Joining: who holds our Join now (monitored): the seed asked, until the GridMaster's JoinChallenge comes, then
  // that GridMaster. Either may die with the Join unanswered; the node then asks its seeds again (ask_next_seed)
  // rather than wait out the join timeout for an answer that cannot come.
  caf::actor_addr join_holder;
  std::string join_holder_name;  // for the log and the join's error: "seed host:port", "the GridMaster"
  // As a seed: the Joins passed on to the GridMaster that it has not yet taken in (it acknowledges each; at most
  // kMaxPassedJoins, by sequence number). If the GridMaster is lost first, their joiners hear "try again"
  // (answer_passed_joins in node_join.cpp): they would otherwise wait out their join timeout for nothing.
  struct PassedJoin {
    caf::actor joiner;
    std::uint64_t node_id = 0;
  };
  std::map<std::uint64_t, PassedJoin> passed_joins;
  std::uint64_t passed_sequence = 0;
};

caf::behavior node(caf::stateful_actor<NodeState>* self, NodeSetup setup);

}  // namespace gridtrain::actors
