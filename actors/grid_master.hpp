#pragma once
// GridMaster: the cluster's membership and grid. One per cluster, spawned by the node that bootstraps it.
//
// It keeps: the members (their handles and last NodeReport), the grid::Layout, the epoch and the layout version
// (raised on every change).
// It reacts to: Join (without a nonce: answered with a JoinChallenge; with the nonce of one, checked: protocol,
// token proof over that nonce, model signature, a well-formed request; then Welcome or Reject with a reason),
// Leave, the down_msg of a member's node (it monitors every one), NodeReport, grid_view_atom (the live grid, from
// the last reports), and stats_atom (what it turned away: JoinStats).
// On every join or leave it turns the Layout's LayoutDelta into messages: StopLine to the LineMasters that lost
// their line, StartLine to the appointed LineMaster of each new or changed line only, and the GridState to
// every node.
//
// Failover (docs/design.md, "GridMaster failover"): a GridMaster is spawned either by the node that bootstraps the
// cluster (leading from the start) or by a node that lost its GridMaster and stands as its successor, with the
// last GridState it held (electing). Electing, it counts the Joins that are votes from members of that state, and
// takes over only with a strict majority of its quorum members: at once when every member but the lost
// GridMaster's node voted, otherwise after a grace for the late ones. Taking over, it raises the epoch, restores
// the layout without the members that did not vote, and starts every line under the new epoch. Leading, it holds
// the cluster only while it reaches a strict majority of the confirmed members (GridState::quorum_members): a
// loss that would leave it fewer makes it step down (end) instead, so that a GridMaster cut off from most of its
// cluster never runs a second cluster beside the one the others elect.

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/credentials.hpp"
#include "actors/messages.hpp"
#include "config/config.hpp"
#include "grid/layout.hpp"

namespace gridtrain::actors {

struct GridMasterSetup {
  config::Config config;  // the cluster's config: the grid's shape and every line's settings come from it
  Credentials credentials;  // the cluster token (join proofs) and TLS identity (dials)
  std::uint64_t model_signature = 0;
  std::uint64_t model_floats = 0;
  std::string address;  // advertised host:port of the node hosting the GridMaster
  std::uint64_t node_id = 0;  // that node's id
  // Set: stand as successor, electing, with the last state this node held. Unset: bootstrap a cluster.
  std::optional<GridState> takeover;
  // Electing with a majority but not every vote: how long to wait for the rest before taking over without them.
  std::chrono::milliseconds takeover_grace{500};
  // A member that sends no report for this long is lost, as if its connection had closed (zero: never). CAF
  // reports a death only over a direct connection; behind a relay a killed member stayed in the grid for good.
  // The nodes report every 250 ms; the node sets this to several connection timeouts (see node_report.cpp).
  std::chrono::milliseconds silence_limit{0};
  // Members in this process are judged by silence (and by the lease) too: only for tests whose local stand-ins
  // play remote members.
  bool judge_local_silence = false;
  // The GridMaster's lease (zero: none). It leads only while a strict majority of the confirmed members have,
  // within the lease, echoed one of its answers to their reports (NodeReport::lease_stamp): a member that lost it
  // votes only once the lease has passed, and then some, since the last answer it got (see node_report.cpp). So a
  // GridMaster cut off from the majority has stepped down before the majority can elect another; without it,
  // both answered as GridMaster for a second or more, and the old one still let new nodes in.
  std::chrono::milliseconds lease{0};
};

// Joins of new nodes an electing GridMaster holds until it takes over; more are refused (the node retries).
inline constexpr std::size_t kMaxWaitingJoins = 64;

// Join challenges a GridMaster holds unanswered at most (the oldest is forgotten first), and how long one is good:
// a node answers its challenge at once, so either bound is reached only by a flood or a node that stalled.
inline constexpr std::size_t kMaxJoinChallenges = 4096;
inline constexpr std::chrono::seconds kJoinChallengeLifetime{30};

// The settings every line of this cluster runs with.
LineSettings line_settings(const config::Config& config, std::uint64_t model_floats);

struct GridMasterState {
  struct Member {
    std::string address;
    std::string data_address;
    caf::actor node;
    std::vector<caf::actor> dimension_nodes;
    std::vector<caf::actor> line_masters;
    std::optional<NodeReport> report;
    std::uint64_t acked_version = 0;  // the layout version of this epoch its last report acknowledged
    std::uint64_t state_sent = 0;     // the state_generation it was last sent (grid_master.cpp, send_state)
    bool state_due = false;           // listed in state_due
    std::uint64_t reports = 0;  // every kRouteCheckEvery-th report also checks the route to it
    caf::actor_clock::time_point heard;  // its last report, or its welcome
    // The newest of our answers it has echoed (NodeReport::lease_stamp), or its welcome: it promised not to vote
    // for another GridMaster until a while after it got that answer (GridMasterSetup::lease).
    caf::actor_clock::time_point lease;
  };

  static inline const char* name = "grid_master";
  GridMasterSetup setup;
  LineSettings settings;
  caf::actor_clock::time_point watched;  // the last look for silent members (GridMasterSetup::silence_limit)
  bool electing = false;
  std::uint64_t epoch = 0;  // a bootstrap's: the wall clock (grid_master.cpp); raised by a successor on failover
  std::uint64_t layout_version = 0;
  grid::Layout layout = grid::Layout::fixed(1);
  std::map<std::uint64_t, Member> members;
  // The confirmed members (GridState::quorum_members), and the layout version every member must acknowledge
  // before the present members are confirmed in their place (0: nothing to confirm).
  std::set<std::uint64_t> quorum_members;
  std::uint64_t confirm_version = 0;
  std::size_t unacked = 0;  // members that have not acknowledged confirm_version yet
  // Raised on every change to what the GridState holds; the state as a message, built once per generation.
  std::uint64_t state_generation = 1;
  caf::message state_message;
  std::uint64_t state_message_generation = 0;
  // What the next flush sends: the state to these members, then these welcomes (grid_master.cpp, flush).
  std::vector<std::uint64_t> state_due;
  std::vector<Welcome> welcomes_due;  // a flush_atom is on its way while either list holds something
  // Electing: the votes so far (the voters' Joins), whether the grace timer is armed, and the Joins of new nodes
  // that wait for the outcome.
  std::map<std::uint64_t, Join> votes;
  bool grace_armed = false;
  std::vector<Join> waiting;
  // The JoinChallenges sent and not answered yet: nonce -> the node it was sent to, and when.
  struct Challenge {
    std::uint64_t node_id = 0;
    caf::actor_clock::time_point sent;
  };
  std::map<std::uint64_t, Challenge> challenges;
  std::uint64_t rejected = 0;
  std::uint64_t bad_messages = 0;
  std::uint64_t stale_join_proofs = 0;  // Joins with a nonce it did not send, or took already (replays), dropped
  MembershipFigures membership;
};

caf::behavior grid_master(caf::stateful_actor<GridMasterState>* self, GridMasterSetup setup);

// What the GridMaster pushes to every node on each change (and a successor would restore from).
GridState grid_state(const GridMasterState& state);

}  // namespace gridtrain::actors
