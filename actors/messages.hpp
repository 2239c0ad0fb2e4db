#pragma once
// Every message of the gridtrain protocol, in one place (docs/design.md, "The actors").
//
// CAF 0.17 traps this file exists to avoid:
// - A message type that is not registered is sent EMPTY, with only a log line. Every type here is registered in
//   register_message_types() (CAF 0.17's form of a type-ID block); a test sends each one across a real
//   connection and checks it arrives whole.
// - std::vector<float> is serialized element by element (about 80 MB/s). FloatPayload moves raw bytes instead
//   (apply_raw, about 1 GB/s). Floats travel in the host's byte order: every supported host is little-endian.
//
// The reports a node and the cluster give of themselves (RoundStats, NodeStats, GridView, ...) are plain structs in
// reports.hpp, so that telemetry/ reads them without CAF; how they cross the wire is here.
//
// The control plane only: the chunks of a round travel over the data plane (dataplane/), not here. Round control
// (StartRound, RoundDone) carries the full round key (epoch, layout_version, dim, line, round). Peers are sent once
// per layout version (StartLine), not per message.

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/reports.hpp"
#include "base/result.hpp"
#include "allreduce/round_config.hpp"
#include "allreduce/round_key.hpp"
#include "grid/cube.hpp"
#include "grid/layout.hpp"

namespace gridtrain::allreduce {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RoundKey& x) {
  return f(caf::meta::type_name("round_key"), x.epoch, x.layout_version, x.dim, x.line, x.round);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RoundConfig& x) {
  return f(caf::meta::type_name("round_config"), x.reduce_threshold, x.complete_threshold, x.advance_threshold,
           x.quorum, x.quorum_timeout_ms, x.max_chunk_floats, x.elastic_rate, x.outer, x.outer_rate, x.outer_momentum,
           x.wire);
}

}  // namespace gridtrain::allreduce

namespace gridtrain::actors {

// Raised whenever the wire format or the meaning of a message changes; a joining node with another version is
// rejected.
inline constexpr std::uint32_t protocol_version = 10;  // 10: NodeFigures::epochs_done

// Every node offers grid::kMaxDims DimensionNodes and LineMasters, whatever its own config says: the cluster's
// config, not the joiner's, decides how many dimensions the grid uses.
inline constexpr std::size_t kDimsOffered = grid::kMaxDims;

// The largest payload a peer may announce. A garbage length must not make us allocate gigabytes.
inline constexpr std::uint64_t max_payload_floats = std::uint64_t{1} << 28;

// Float payloads refused while decoding, in this process (a declared count over max_payload_floats, or over the
// bytes the message holds): CAF drops such a message before any handler sees it, so they are counted here, where
// the count is checked (NodeStats::refused_payloads, /metrics). The first few are logged.
std::uint64_t refused_payloads();
void refuse_payload(std::uint64_t declared, std::size_t bytes_there);

// A block of floats that crosses the wire as raw bytes.
struct FloatPayload {
  std::vector<float> values;
  friend bool operator==(const FloatPayload&, const FloatPayload&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, FloatPayload& x) {
  if constexpr (requires { f.apply_raw(std::size_t{}, static_cast<void*>(nullptr)); }) {
    std::uint64_t n = x.values.size();
    if (auto err = f(n)) return err;
    if constexpr (!Inspector::reads_state) {  // loading
      const auto* bytes = dynamic_cast<const caf::binary_deserializer*>(&f);
      if (n > max_payload_floats) {
        refuse_payload(n, bytes ? bytes->remaining() : 0);
        return caf::make_error(caf::sec::invalid_argument, "payload too large");
      }
      // A small message may declare a huge count: check it against the bytes that are there before allocating.
      if (bytes && n * sizeof(float) > bytes->remaining()) {
        refuse_payload(n, bytes->remaining());
        return caf::make_error(caf::sec::invalid_argument, "payload shorter than its float count");
      }
      x.values.resize(n);
    }
    return n == 0 ? caf::error{} : f.apply_raw(n * sizeof(float), x.values.data());
  } else {
    // Printing (logs, to_string): the size, not millions of numbers.
    auto n = x.values.size();
    return f(caf::meta::type_name("floats"), n);
  }
}

// -- membership ------------------------------------------------------------------------------------------------

// Node -> GridMaster (through any member, the seed). The handles let the GridMaster appoint the node's
// LineMasters and tell them who their peers are. Sent twice (docs/design.md, "Joining with a challenge"): first
// without a nonce, which the GridMaster answers with a JoinChallenge; then straight to the GridMaster with its
// nonce and a proof over it, which the GridMaster accepts once.
struct Join {
  std::uint64_t node_id = 0;
  std::string address;       // advertised host:port
  std::string data_address;  // host:port of its data plane ("" when its peers are in its process)
  std::uint64_t model_signature = 0;
  std::uint64_t model_floats = 0;
  std::uint32_t protocol = 0;
  std::uint64_t request = 0;  // the node's number for this Join; its JoinChallenge names it
  std::uint64_t nonce = 0;    // the GridMaster's challenge this Join answers (0: none yet)
  std::string token_proof;    // token_proof(token, node_id, nonce); never the token itself
  caf::actor node;
  std::vector<caf::actor> dimension_nodes;  // kDimsOffered of them, dimension d at index d
  std::vector<caf::actor> line_masters;     // likewise
  // Failover (docs/design.md, "GridMaster failover"): the epoch of the cluster the sender was last a member of
  // (0: never one), and whether it is a vote: the sender lost its GridMaster and asks the receiver, which it
  // believes the lowest-id reachable member of its last GridState, to take over. A node votes for one candidate
  // at a time; a candidate itself sends no votes.
  std::uint64_t epoch = 0;
  bool vote = false;
  // It lost contact with its GridMaster and kept its lines (not Removed): if that GridMaster still has it, it is
  // told so (a Welcome with kept_place) rather than refused as a duplicate.
  bool lines_kept = false;
  // The wire format its config asks for (allreduce.wire): a line's members must all encode alike, and a node that
  // asked for another than the cluster's would silently run the cluster's, so it is refused.
  allreduce::WireFormat wire = allreduce::WireFormat::fp32;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Join& x) {
  return f(caf::meta::type_name("join"), x.node_id, x.address, x.data_address, x.model_signature, x.model_floats,
           x.protocol, x.request, x.nonce, x.token_proof, x.node, x.dimension_nodes, x.line_masters, x.epoch, x.vote,
           x.lines_kept, x.wire);
}

// GridMaster -> Node: prove the token for your Join `request` over this nonce, which is good for that one Join
// (and for a limited time). A node answers only a challenge for a Join it sent and has not answered yet, so a
// replayed Join makes the GridMaster challenge a node that ignores it.
struct JoinChallenge {
  std::uint64_t node_id = 0;
  std::uint64_t request = 0;
  std::uint64_t nonce = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, JoinChallenge& x) {
  return f(caf::meta::type_name("join_challenge"), x.node_id, x.request, x.nonce);
}

// GridMaster -> Node: you are in. The run config is the cluster's (YAML text), not the joiner's own.
struct Welcome {
  std::uint64_t node_id = 0;
  std::uint64_t epoch = 0;
  std::string run_config;
  caf::actor grid_master;
  std::string grid_master_address;  // advertised host:port of the node hosting it
  std::uint64_t grid_master_node_id = 0;  // that node's id
  std::uint64_t layout_version = 0;       // the version that placed it: its lines are of this version or newer
  // A successor took over with the node where it was (it voted): it keeps its lines' model, no warm start.
  bool kept_place = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Welcome& x) {
  return f(caf::meta::type_name("welcome"), x.node_id, x.epoch, x.run_config, x.grid_master, x.grid_master_address,
           x.grid_master_node_id, x.layout_version, x.kept_place);
}

// GridMaster -> Node: you are not in, and why (the node prints it and exits with code 3).
struct Reject {
  std::uint64_t node_id = 0;
  std::string reason;
  // The node asked is not a member of a cluster (it is joining, or lost its cluster): not the cluster's
  // answer, so a joiner with more seeds asks the next one.
  bool not_a_member = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Reject& x) {
  return f(caf::meta::type_name("reject"), x.node_id, x.reason, x.not_a_member);
}

// Node -> GridMaster on clean shutdown, as a request: the GridMaster answers left_atom once the node is out.
struct Leave {
  std::uint64_t node_id = 0;
  std::uint64_t epoch = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Leave& x) {
  return f(caf::meta::type_name("leave"), x.node_id, x.epoch);
}

// GridMaster -> a node it took out of the grid (it left, or the failure detector declared it down while it may
// still be alive: stalled past the connection timeout, cut off for a while). A node that did not ask to leave
// rejoins; it may never get this, if it is really gone or cut off, and then notices the GridMaster's down_msg.
struct Removed {
  std::uint64_t node_id = 0;
  std::uint64_t epoch = 0;
  std::uint64_t layout_version = 0;  // the version that no longer has it
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Removed& x) {
  return f(caf::meta::type_name("removed"), x.node_id, x.epoch, x.layout_version);
}

// How a node's attempt to join ended (the Node's answer to outcome_atom).
enum class JoinResult : std::uint8_t {
  pending,      // no answer yet
  welcomed,
  rejected,     // the cluster said no; `reason` says why (gridnode exits 3)
  unreachable,  // the seed could not be reached, or did not answer in time
  stopped,      // the node was stopped before an answer came
};

std::string to_string(JoinResult result);

struct JoinOutcome {
  JoinResult result = JoinResult::pending;
  std::string reason;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, JoinOutcome& x) {
  return f(caf::meta::type_name("join_outcome"), x.result, x.reason);
}

// -- lines -----------------------------------------------------------------------------------------------------

struct LinePeer {
  std::uint64_t node_id = 0;
  caf::actor dimension_node;
  std::string address;       // the peer's advertised host:port: members connect to each other directly
  std::string data_address;  // its data plane's host:port, where the line's chunks go
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LinePeer& x) {
  return f(caf::meta::type_name("line_peer"), x.node_id, x.dimension_node, x.address, x.data_address);
}

// The most peers a StartLine may name: more than any line of a grid holds (a 1-D grid of 65,536 nodes), and
// little enough that a garbage StartLine cannot make a member allocate much.
inline constexpr std::size_t kMaxLinePeers = std::size_t{1} << 16;

// How the rounds of a line run. The cluster's config decides, and the GridMaster ships it in every StartLine, so
// every member of a line cuts the model the same way whatever its own config says.
struct LineSettings {
  std::uint64_t model_floats = 0;      // N: every member's ParameterStore holds this many floats
  std::uint32_t rounds_in_flight = 0;  // k (grid.rounds_in_flight, set by line_settings()); round r in slot r % k
  allreduce::RoundConfig round;        // the section allreduce, whole
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LineSettings& x) {
  return f(caf::meta::type_name("line_settings"), x.model_floats, x.rounds_in_flight, x.round);
}

// Why a member whose store holds `model_floats` floats cannot run rounds with `settings`, or ok: the same
// validation the config ran on the cluster's own config (allreduce::validate), since a StartLine comes off the
// wire.
Status check(const LineSettings& settings, std::uint64_t model_floats);

// GridMaster -> appointed LineMaster, then LineMaster -> every member's DimensionNode -> its data plane: the line's
// members for this layout version, in peer-index order. Sent once per layout version.
struct StartLine {
  std::uint64_t epoch = 0;
  std::uint64_t layout_version = 0;
  std::uint32_t dim = 0;
  std::uint64_t line = 0;
  std::vector<LinePeer> peers;
  LineSettings settings;
  caf::actor line_master;  // where members report RoundDone; set by the LineMaster when it forwards
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StartLine& x) {
  return f(caf::meta::type_name("start_line"), x.epoch, x.layout_version, x.dim, x.line, x.peers, x.settings,
           x.line_master);
}

// GridMaster -> a LineMaster that lost its line (the line emptied, or another member masters it now).
struct StopLine {
  std::uint64_t epoch = 0;
  std::uint64_t layout_version = 0;
  std::uint32_t dim = 0;
  std::uint64_t line = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StopLine& x) {
  return f(caf::meta::type_name("stop_line"), x.epoch, x.layout_version, x.dim, x.line);
}

// -- rounds ----------------------------------------------------------------------------------------------------

// LineMaster -> members' DimensionNodes: begin round key.round.
struct StartRound {
  allreduce::RoundKey key;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StartRound& x) {
  return f(caf::meta::type_name("start_round"), x.key);
}

// DimensionNode -> LineMaster: this peer finished the round (completed, or finished early by catch-up).
struct RoundDone {
  allreduce::RoundKey key;
  std::uint32_t from = 0;
  std::uint32_t chunks_missing = 0;  // chunks with no reduced value at completion
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RoundDone& x) {
  return f(caf::meta::type_name("round_done"), x.key, x.from, x.chunks_missing);
}

// -- grid state, reports, the live grid ------------------------------------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Placement& x) {
  return f(caf::meta::type_name("placement"), x.node_id, x.address, x.coords, x.masters);
}

// A member as the GridMaster knows it: where it is, and the handles it joined with (Join), so that whoever holds
// the GridState could appoint its LineMasters and name its DimensionNodes.
struct MemberState {
  Placement place;
  caf::actor node;
  std::vector<caf::actor> dimension_nodes;  // kDimsOffered, dimension d at index d
  std::vector<caf::actor> line_masters;
  std::string data_address;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MemberState& x) {
  return f(caf::meta::type_name("member_state"), x.place, x.node, x.dimension_nodes, x.line_masters,
           x.data_address);
}

// grid::LayoutSnapshot on the wire, flattened into plain vectors: node i sits at coords[i*dims .. (i+1)*dims),
// and line (master_dims[j], master_lines[j]) is mastered by master_nodes[j]. layout_snapshot() checks the sizes
// before anything is built from them; grid::Layout::restore checks the rest.
struct LayoutState {
  std::int32_t fixed_dims = 0;  // 0: automatic
  std::int32_t max_line = 0;
  std::int32_t dims = 1;
  std::int32_t side = 0;
  std::vector<std::uint64_t> nodes;  // ascending
  std::vector<std::int32_t> coords;
  std::vector<std::uint32_t> master_dims;
  std::vector<std::uint64_t> master_lines;
  std::vector<std::uint64_t> master_nodes;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LayoutState& x) {
  return f(caf::meta::type_name("layout_state"), x.fixed_dims, x.max_line, x.dims, x.side, x.nodes, x.coords,
           x.master_dims, x.master_lines, x.master_nodes);
}

LayoutState layout_state(const grid::LayoutSnapshot& snapshot);
// The snapshot `state` describes, or why it describes none (sizes that do not fit each other). It is not yet a
// valid layout: grid::Layout::restore says whether it is.
Result<grid::LayoutSnapshot> layout_snapshot(const LayoutState& state);

// GridMaster -> every node on each change: its whole state, small, so that a successor could take over from any
// node's copy (failover): the members with their handles, the layout as it is, the versions and the epoch.
struct GridState {
  std::uint64_t epoch = 0;
  std::uint64_t layout_version = 0;
  std::uint32_t dims = 0;
  std::vector<std::int32_t> shape;
  std::vector<MemberState> members;  // ascending by node_id
  LayoutState layout;
  std::uint64_t grid_master_node = 0;  // the id of the node hosting the GridMaster
  // The confirmed members (ascending): those every member acknowledged. A GridMaster holds the cluster only while
  // it reaches a strict majority of them, and a successor takes over only with the votes of a strict majority.
  std::vector<std::uint64_t> quorum_members;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, GridState& x) {
  return f(caf::meta::type_name("grid_state"), x.epoch, x.layout_version, x.dims, x.shape, x.members, x.layout,
           x.grid_master_node, x.quorum_members);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeFigures& x) {
  return f(caf::meta::type_name("node_figures"), x.rounds_done, x.param_mean, x.param_l2, x.samples,
           x.test_accuracy, x.epochs_done, x.stale_dropped, x.quorum_shortfalls);
}

// Node -> GridMaster, every report interval: what `gridnode status` shows about the node.
struct NodeReport {
  std::uint64_t node_id = 0;
  NodeFigures figures;
  // The parameters at allreduce::replica_sample_indices(N): enough for the GridMaster to estimate each node's
  // distance to the cluster mean without shipping whole models.
  FloatPayload sample;
  // The last GridState the node holds: the report acknowledges it (see GridState::quorum_members).
  std::uint64_t epoch = 0;
  std::uint64_t layout_version = 0;
  // The stamp of the newest answer it got from this GridMaster (its clock; 0: none yet): the GridMaster's lease
  // (GridMasterSetup::lease) holds while a majority echo recent ones.
  std::int64_t lease_stamp = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeReport& x) {
  return f(caf::meta::type_name("node_report"), x.node_id, x.figures, x.sample, x.epoch, x.layout_version,
           x.lease_stamp);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeView& x) {
  return f(caf::meta::type_name("node_view"), x.place, x.figures, x.param_distance);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MembershipFigures& x) {
  return f(caf::meta::type_name("membership_figures"), x.joins, x.join_messages, x.join_ns, x.leaves,
           x.leave_messages, x.leave_ns, x.states_sent, x.state_builds, x.state_build_ns);
}

// The GridMaster's answer to grid_view_atom.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, GridView& x) {
  return f(caf::meta::type_name("grid_view"), x.epoch, x.layout_version, x.dims, x.shape, x.nodes,
           x.grid_master_node, x.membership);
}

// -- counters (answers to stats_atom) -----------------------------------------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RoundStats& x) {
  return f(caf::meta::type_name("round_stats"), x.rounds_done, x.caught_up, x.abandoned, x.stale_dropped,
           x.malformed, x.quorum_shortfalls, x.bytes_sent, x.bytes_received, x.frames_unsent);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, DimensionStats& x) {
  return f(caf::meta::type_name("dimension_stats"), x.dim, x.layout_version, x.line, x.peers, x.rounds);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, DataPlaneStats& x) {
  return f(caf::meta::type_name("data_plane_stats"), x.handshakes, x.bad_frames, x.oversized, x.truncated,
           x.strangers, x.busy, x.busy_address, x.unreachable_peers);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, JoinStats& x) {
  return f(caf::meta::type_name("join_stats"), x.rejected, x.replayed, x.bad_messages);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeStats& x) {
  return f(caf::meta::type_name("node_stats"), x.node_id, x.member, x.dims, x.bad_messages, x.refused_payloads,
           x.data_plane, x.joins);
}

// -- atoms (requests and signals without a body) -----------------------------------------------------------------

using grid_view_atom = caf::atom_constant<caf::atom("gridview")>;  // -> GridView (Node, GridMaster)
// Node: -> std::vector<std::uint64_t>, the ids of its last GridState's members, ascending. Answered from what the
// node holds, without asking the GridMaster; asked in-process only (NodeHandle::members).
using members_atom = caf::atom_constant<caf::atom("members")>;
// -> NodeStats (Node) / DimensionStats (DimensionNode) / JoinStats (GridMaster)
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using left_atom = caf::atom_constant<caf::atom("left")>;          // GridMaster's answer to Leave
using tick_atom = caf::atom_constant<caf::atom("tick")>;          // Node: time to report
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;  // to self: a timer for deadlines due at its time
// Sets that timer: (deadline_atom, at) to `self` when `at` comes (actors/round_deadlines.hpp says when one is needed).
template <class Self>
void set_deadline_timer(Self self, caf::actor_clock::time_point at, caf::actor_clock::time_point now) {
  self->delayed_send(self, at - now, deadline_atom::value, static_cast<std::int64_t>(at.time_since_epoch().count()));
}
// On that timer's message, (deadline_atom, at): the keys of `deadlines` (a RoundDeadlines) now due, the next timer
// set where one is needed.
template <class Self, class Deadlines>
auto due_deadlines(Self self, Deadlines& deadlines, std::int64_t at) {
  const auto now = self->clock().now();
  auto due = deadlines.fired(caf::actor_clock::time_point{caf::actor_clock::duration_type{at}}, now);
  if (due.arm) set_deadline_timer(self, *due.arm, now);
  return std::move(due.keys);
}
// The data plane -> its node's DimensionNode, in process: (round_event_atom, kind, key, self index, chunks missing),
// kind 0 a round done, 1 a round started by a peer's frame, 2 a round whose frames were still landing at its deadline
// (dataplane::RoundEvent).
using round_event_atom = caf::atom_constant<caf::atom("roundevt")>;
using begin_atom = caf::atom_constant<caf::atom("begin")>;        // Node: start joining, with our address
using outcome_atom = caf::atom_constant<caf::atom("outcome")>;    // Node: -> join outcome, once known
using stop_atom = caf::atom_constant<caf::atom("stop")>;          // Node: leave cleanly and end
// Paced by the learner (actors/round_allowance.hpp): Node: (allow_rounds_atom, uint8 waiting): wake the LineMasters
// of those dimensions (a bit each), which wait for a grant; (allow_rounds_atom, dim, n): grant n more rounds to the
// line in `dim` (tests), waking its LineMaster if it waits; LineMaster: (allow_rounds_atom): take what was granted.
using allow_rounds_atom = caf::atom_constant<caf::atom("allowrnds")>;
// LineMaster, to itself: (settle_atom, generation): the line stayed unchanged for allreduce.line_settle_ms.
using settle_atom = caf::atom_constant<caf::atom("settle")>;
// LineMaster, to itself: time to look for peers that went silent on its rounds (see "Nudges" in line_master.hpp).
using nudge_atom = caf::atom_constant<caf::atom("nudge")>;
using join_timeout_atom = caf::atom_constant<caf::atom("jointime")>;  // Node: the seed did not answer in time
using seed_retry_atom = caf::atom_constant<caf::atom("seedretry")>;  // Node: ask the seeds again
// Node -> its DimensionNodes and LineMasters (and on to the data plane): the node lost the cluster; drop every line.
// (lost_atom, epoch, layout_version): drop only a line older than that (the node was welcomed at that version,
// and its lines of the new one may already have arrived).
using lost_atom = caf::atom_constant<caf::atom("lost")>;
using walk_atom = caf::atom_constant<caf::atom("walk")>;          // Node: the next step of its rejoin walk
using lease_probe_atom = caf::atom_constant<caf::atom("leaseprb")>;  // Node: what its lost GridMaster's port said
using silence_atom = caf::atom_constant<caf::atom("silence")>;  // GridMaster: look for members gone silent
using lease_atom = caf::atom_constant<caf::atom("lease")>;      // GridMaster: does a majority still hold its lease?
using takeover_atom = caf::atom_constant<caf::atom("takeover")>;  // GridMaster: the election's grace has passed
using flush_atom = caf::atom_constant<caf::atom("flush")>;  // GridMaster: send the states and welcomes now due
// Node -> the GridMaster it stands as candidate with: abandon the election (a live cluster or a lower member
// answered).
using step_down_atom = caf::atom_constant<caf::atom("stepdown")>;
// Node: (warm_params_atom, offset, count) -> (signature, model floats, FloatPayload): the floats [offset, offset +
// count) of its model now, for a joining node's warm start. The model goes in slices of at most
// kWarmSliceFloats: CAF 0.17 keeps a connection's write buffer at the largest message it ever sent, so a whole
// 64 MB model in one answer left the member that served it 64 MB larger for as long as the connection lived
// (bench/memory_flat: +66,588 KiB on the node that served a rejoining peer, +1 MB on the one that did not; with
// 1 MB slices +8 MB).
using warm_params_atom = caf::atom_constant<caf::atom("wparams")>;
constexpr std::uint64_t kWarmSliceFloats = std::uint64_t{1} << 18;  // 1 MB
// Node, asked by its own process once welcomed: copy a member's model (see NodeHandle::warm_start) -> the id of the
// member copied, 0 when alone.
using warm_start_atom = caf::atom_constant<caf::atom("wstart")>;

// Registers every type above with the actor system. Call it before the actor system is created.
void register_message_types(caf::actor_system_config& cfg);

}  // namespace gridtrain::actors
