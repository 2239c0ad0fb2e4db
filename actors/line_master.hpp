#pragma once
// LineMaster: paces the allreduce rounds of one line. Every node has one per dimension, dormant until the
// GridMaster appoints it with a StartLine for the line it masters.
//
// It keeps: its line (members and settings, for one layout version) and the rounds still open: started, and not
// yet reported done by every peer, at most k of them (rounds_in_flight).
// It reacts to: StartLine (forwards it to every member, then starts round 0), StopLine and lost_atom (the node
// lost the cluster; either way it goes dormant), RoundDone,
// and, in timeout quorum mode, the deadlines of its open rounds (kept with as few timers as will do:
// actors/round_deadlines.hpp).
// It starts round r+1 once round r has its advance quorum: ceil(θa·p) peers reported it (timeout mode: all of
// them but those gone silent or late (allreduce/peer_patience.hpp), or ceil(θa·p) once allreduce.quorum_timeout_ms
// has passed since r started). A late peer's report is not waited for at all here, not even for a probe: the line
// runners already gave its parts their probe before they reported, and a second probe here would only delay the
// next round (1.3 × 1.3 the round's time). It never waits for the rest:
// when a new round would make k+1 open, the oldest open round is retired, and a peer that reports it late, or
// never, catches up by round key on the newer round its line runner's slot receives (round r runs on slot r % k). So
// one slow or stalled peer never stops its line; it only drops out of the rounds it misses, until it catches up
// or the failure detector removes it (a new layout version re-forms the line). A line of one peer runs no rounds.
// It tells: every member's DimensionNode (StartLine, StartRound).
//
// Nudges: CAF 0.17 may lose a message to a node this one has no connection of its own to (it goes through a
// third node, and routes change as nodes die). Seen after a failover that took a 3x3 grid to one line of 5 (3 runs
// in about 70): one member never received the new line's StartLine nor its round 0, though the later StartRounds
// came; it sat out every round for good, while its peers waited out each round's deadline without it. So a peer
// that has reported none of the line's rounds for a while, with rounds open, is sent the StartLine and the open
// rounds' StartRounds again; its DimensionNode takes a StartLine it holds as a no-op. The while is kNudgeInterval,
// or kNudgeRounds of the line's rounds where they come further apart (a big model, a loaded machine: with 4,096
// in-process nodes on 2 cores, nudges at a fixed second took a quarter of the cluster's rounds per second). A
// stalled or merely slow peer is nudged too, at no cost beyond the message, until it reports again or the failure
// detector removes it. A timer that comes an interval late means this node was stalled itself (SIGSTOP, a starved
// process): its peers' silence is then its own, and counts afresh (in a chaos run, a LineMaster waking from a stop
// nudged all six of its peers).
//
// Settling (allreduce.line_settle_ms, S): a StartLine that comes within 5·S of the one before it (a burst of joins
// or moves is restarting this line again and again) holds the line's first round until the line has been
// unchanged for S; a newer StartLine restarts the wait. Rounds started in such a burst would be abandoned at the
// next restart, and their frames sent and drained for nothing: with 4,096 in-process nodes in 2-D they held the
// cluster's rounds back for many seconds after it formed. An isolated StartLine (a failure, one join) starts its
// rounds at once, so recovering from a fault waits for nothing. Why 5·S to tell a burst, not S: while 4,096 nodes
// join, a line of 64 is restarted about every 250 ms, so with S = 200 ms most restarts looked isolated and started
// rounds (measured: BENCHMARKS.md, "The control plane at scale").

#include <caf/all.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "actors/messages.hpp"
#include "actors/round_allowance.hpp"
#include "actors/round_deadlines.hpp"
#include "allreduce/peer_patience.hpp"

namespace gridtrain::actors {

struct LineMasterState {
  // How often a LineMaster looks for silent peers, and the least silence that earns a nudge (see "Nudges"); a line
  // whose rounds come further apart waits kNudgeRounds of its rounds, at most kNudgeMaxSilence.
  static constexpr caf::timespan kNudgeInterval = std::chrono::seconds(1);
  static constexpr int kNudgeRounds = 4;
  static constexpr caf::timespan kNudgeMaxSilence = std::chrono::seconds(30);

  struct OpenRound {
    std::vector<std::uint8_t> reported;  // by peer index: 1 where it reported
    std::uint32_t count = 0;     // of reported
    bool deadline_passed = false;
    caf::actor_clock::time_point started;
    // By peer index: microseconds from `started` to its report (PeerPatience::kUnheard: none yet).
    std::vector<std::int64_t> reported_us;
  };

  static inline const char* name = "line_master";
  std::uint32_t dim = 0;
  std::optional<StartLine> line;
  std::uint32_t advance_quorum = 1;  // ceil(θa·p)
  std::uint64_t next_round = 0;
  std::map<std::uint64_t, OpenRound> open;  // round -> who reported it; at most k
  RoundDeadlines<std::uint64_t, caf::actor_clock::time_point> deadlines;  // timeout mode: of the open rounds
  // Timeout mode: the peers that reported none of the last rounds by their deadlines, or reported most of the last
  // rounds well after the others, not waited for until they report again, or in time again (has_advance_quorum; the
  // line runner skips their parts likewise, a late peer's after a probe).
  allreduce::PeerPatience patience;
  bool advance = true;  // round next_round - 1 has its advance quorum (true before round 0)
  // Paced by the learner (allreduce.every_steps > 0, or cpu_share < 1 on a training node): the rounds it may still
  // start. The node's learner grants one more when it allows a round (every every_steps steps, or while averaging is
  // within its CPU share: the node's RoundAllowance, taken here before each round), so a line runs no faster than
  // its master's learner allows; it never holds more than k, so a line that could not run (a stalled peer, no line
  // yet) does not fire a burst of rounds afterwards. Not paced (no allowance): rounds back to back.
  std::uint64_t every_steps_budget = 0;
  std::shared_ptr<RoundAllowance> allowance;  // paced: the node's grants; null: not paced
  std::uint64_t allowance_taken = 0;          // the grants taken so far (RoundAllowance::take)
  caf::timespan settle{0};  // allreduce.line_settle_ms; 0: never hold a round
  std::optional<caf::actor_clock::time_point> last_start_line;  // when the latest StartLine came
  bool settling = false;           // a burst's StartLine holds the first round until settle_generation's timer
  std::uint64_t settle_generation = 0;  // tells the latest settle timer from those a newer StartLine replaced
  // Per peer: when it last reported a round, or was last nudged (the line's start for a peer yet to report).
  std::vector<caf::actor_clock::time_point> heard;
  std::vector<bool> nudged;    // per peer: nudged at least once on this line (logged once)
  caf::timespan round_gap{0};  // between round starts, smoothed: a slow line nudges less eagerly
  std::optional<caf::actor_clock::time_point> last_round_start;
  bool nudge_pending = false;  // a nudge_atom timer is on its way
  caf::actor_clock::time_point nudge_due;  // when that timer should come: much later, this node itself was stalled
  std::uint64_t nudges = 0;    // peers sent the line again
  std::uint64_t rounds_started = 0;
  std::uint64_t retired_early = 0;  // open rounds retired before every peer had reported them
  std::uint64_t stale = 0;
  std::uint64_t bad_messages = 0;
};

struct LineMasterSetup {
  std::uint32_t dim = 0;
  // Paced by the learner: the node's grants, into an every_steps budget of 0 to start with (see
  // LineMasterState::every_steps_budget). Null: not paced.
  std::shared_ptr<RoundAllowance> allowance;
  caf::timespan settle{0};  // see "Settling" above
};

// Also handles allow_rounds_atom: takes the grants into the every_steps budget; and answers stats_atom with the
// rounds it started.
caf::behavior line_master(caf::stateful_actor<LineMasterState>* self, LineMasterSetup setup);

}  // namespace gridtrain::actors
