#pragma once
// What nodes report about themselves and what the cluster reports about its grid: the round counters and the
// live grid that `gridnode status` shows. Plain structs without CAF, so that telemetry/ reads them without
// knowing actors; messages.hpp says how each one crosses the wire. Header-only.

#include <cstdint>
#include <string>
#include <vector>

namespace gridtrain::actors {

// One line's round counters, as its line runner keeps them (dataplane::DimensionCounters), summed per DimensionNode
// and per node.
struct RoundStats {
  std::uint64_t rounds_done = 0;       // completed, including those finished early by catch-up
  std::uint64_t caught_up = 0;         // finished early because a newer round of the line arrived
  std::uint64_t abandoned = 0;         // dropped unfinished because the line changed
  std::uint64_t stale_dropped = 0;     // frames and messages of a round or line version we have left behind
  std::uint64_t malformed = 0;         // frames and messages that could not belong to our line or round
  std::uint64_t quorum_shortfalls = 0; // rounds completed with a chunk averaged over fewer than p, or missing
  std::uint64_t bytes_sent = 0;        // chunk payloads written to line peers
  std::uint64_t bytes_received = 0;    // chunk payloads received that counted
  std::uint64_t frames_unsent = 0;     // chunks dropped before they were written: their round moved on, or no link

  RoundStats& operator+=(const RoundStats& o) {
    rounds_done += o.rounds_done;
    caught_up += o.caught_up;
    abandoned += o.abandoned;
    stale_dropped += o.stale_dropped;
    malformed += o.malformed;
    quorum_shortfalls += o.quorum_shortfalls;
    bytes_sent += o.bytes_sent;
    bytes_received += o.bytes_received;
    frames_unsent += o.frames_unsent;
    return *this;
  }
  bool operator==(const RoundStats&) const = default;
};

// A DimensionNode's counters (its workers' summed with its own) and its current line.
struct DimensionStats {
  std::uint32_t dim = 0;
  std::uint64_t layout_version = 0;  // of the current line; 0 = none yet
  std::uint64_t line = 0;
  std::uint32_t peers = 0;
  RoundStats rounds;
};

// A node's counters, dimension by dimension.
// What a node's gate let in and turned away (actors/gate.hpp); all 0 for a node that does not listen.
struct GateStats {
  std::uint64_t accepted = 0;        // connections handed to CAF after the handshake
  std::uint64_t not_handshake = 0;   // first bytes that were no handshake (scans, garbage, CAF's own protocol)
  std::uint64_t wrong_protocol = 0;  // a handshake of another channel or version
  std::uint64_t bad_proof = 0;       // dialers without the cluster token
  std::uint64_t timed_out = 0;       // handshakes not finished in time, or cut off
  std::uint64_t overflow = 0;        // answered busy: too many handshakes under way in all
  std::uint64_t busy_address = 0;    // answered busy: too many handshakes under way from that address
  std::uint64_t tls_refused = 0;     // TLS on one side only, or a certificate that fails the cluster CA's check
};

// What a node's data plane refused (dataplane::LinkRefusals), and the strangers at its process's data port.
struct DataPlaneStats {
  std::uint64_t handshakes = 0;  // handshakes that failed either way: no cluster token, TLS on one side, another CA
  std::uint64_t bad_frames = 0;  // 64 bytes that were no frame header
  std::uint64_t oversized = 0;   // frames longer than any chunk of our lines, refused before a byte was read
  std::uint64_t truncated = 0;   // connections that ended inside a frame
  std::uint64_t strangers = 0;   // connections to the data port that sent no data-plane hello
  std::uint64_t busy = 0;        // answered busy at the data port: too many handshakes under way in all
  std::uint64_t busy_address = 0;  // answered busy at the data port: too many under way from that address
  std::uint64_t unreachable_peers = 0;  // now: line peers it dials and has not reached for 10 s (a gauge)
};

// What the GridMaster a node hosts turned away; all 0 where it hosts none.
struct JoinStats {
  std::uint64_t rejected = 0;      // Joins answered with a Reject: another protocol or model, a bad proof, ...
  std::uint64_t replayed = 0;      // Joins with a nonce it did not send or took already (grid_master.hpp), dropped
  std::uint64_t bad_messages = 0;  // unexpected or malformed messages it dropped
};

struct NodeStats {
  std::uint64_t node_id = 0;
  bool member = false;               // welcomed and not yet left
  std::vector<DimensionStats> dims;  // one per dimension a node offers (grid::kMaxDims), dimension d at index d
  std::uint64_t bad_messages = 0;    // unexpected or garbage messages dropped by the node's actors
  std::uint64_t refused_payloads = 0;  // messages of this process refused while decoding (messages.hpp)
  DataPlaneStats data_plane;
  JoinStats joins;
  GateStats gate;                    // filled by NodeHandle::stats() in the node's process; not sent over the wire
  RoundStats total() const {
    RoundStats sum;
    for (const auto& d : dims) sum += d.rounds;
    return sum;
  }
};

// Where a member sits in the grid.
struct Placement {
  std::uint64_t node_id = 0;
  std::string address;                 // advertised host:port
  std::vector<std::int32_t> coords;    // empty while the member is not in the layout
  std::vector<std::uint32_t> masters;  // dimensions whose line this member masters
};

// What a node tells the GridMaster of itself every report interval (NodeReport).
struct NodeFigures {
  std::uint64_t rounds_done = 0;
  double param_mean = 0;
  double param_l2 = 0;
  std::uint64_t samples = 0;
  double test_accuracy = -1;  // < 0: not evaluated yet (or the node does not train)
  // The last training epoch the node finished (its learner's, or what a Python node reported), 0: none yet. A node
  // that joins a running cluster may take up the schedule from it (gridtrain.Node.cluster_epochs_done()).
  std::uint32_t epochs_done = 0;
  std::uint64_t stale_dropped = 0;
  std::uint64_t quorum_shortfalls = 0;
};

// One member of the live grid: where it is, its last figures (all 0, test_accuracy -1, until a report came),
// and its estimated L2 distance to the members' mean (< 0: unknown, no report yet).
struct NodeView {
  Placement place;
  NodeFigures figures;
  double param_distance = -1;
};

// What membership changes cost the GridMaster since it took the cluster (docs/design.md, "Membership at
// scale"): the joins and leaves it handled; the control messages each caused (StopLine; StartLine, and the
// StartLine each appointed LineMaster passes on to its line's peers; the GridState for the joiner and the members
// of the lines it changed; Welcome or Removed); and the CPU time it spent on them. The GridStates sent (after
// changes and with report answers: the other members fetch a change with their next report) and the CPU time to
// build them are counted apart: a state holds every member, so its cost grows with the cluster; it is built once
// per flush of the states due, which serves every change and report before it.
struct MembershipFigures {
  std::uint64_t joins = 0;
  std::uint64_t join_messages = 0;
  std::uint64_t join_ns = 0;
  std::uint64_t leaves = 0;
  std::uint64_t leave_messages = 0;
  std::uint64_t leave_ns = 0;
  std::uint64_t states_sent = 0;
  std::uint64_t state_builds = 0;
  std::uint64_t state_build_ns = 0;
};

// The live grid, as the GridMaster sees it (`gridnode status`).
struct GridView {
  std::uint64_t epoch = 0;
  std::uint64_t layout_version = 0;
  std::uint32_t dims = 0;
  std::vector<std::int32_t> shape;
  std::vector<NodeView> nodes;  // ascending by node id
  std::uint64_t grid_master_node = 0;  // the node that hosts the GridMaster (it moves on failover)
  MembershipFigures membership;
};

}  // namespace gridtrain::actors
