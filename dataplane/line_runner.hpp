#pragma once
// LineRunner: the rounds of one node's line in one grid dimension, run on the data plane's thread.
//
// The control plane (the actors) tells it which line it is in (start_line), when a round starts (start_round, from
// the LineMaster) and when a round's quorum deadline has passed (deadline: the actors keep every clock). It drives
// one allreduce::Round per slot (round r runs in slot r % k, k = rounds in flight), each allocated once per line
// version and reset() for every round after, so a round allocates and zero-fills nothing.
//
// A round's chunks go out in windows: to each peer, at most w = max(1, ceil(kScatterWindow / (p − 1))) of our
// scatter chunks are out whose mean has not come back from it, and each mean (or delta) it sends lets one more go
// to it. A chunk goes out straight from the model where only the kernel reads it (ModelAccess::memory), else copied
// out just before it goes: either way the owner answers with the mean less what arrived, so no copy is kept for the
// update. A window per peer, in
// chunk order: the owner of block j reduces its chunks in the order every peer sends them, so no peer waits on
// another's window; and a silent peer stops only the chunks of its own block, which nobody else could reduce
// anyway.
// A chunk of our own block is not copied out at all where the last contribution it waits for lands: our values are
// read from the model, the deltas written and the chunk's update applied in one pass (Round::fold_target). Else our
// values are copied out just before the Round reduces the chunk (Round::reduces_with), not at the first landing.
// Each chunk's elastic
// update is applied as its mean comes (our own block's as we reduce it), while the mean is still in the cache and
// the peers are still sending: no pass over the whole model waits for the last chunk. So a round that is abandoned
// keeps the updates of the chunks whose means came; each is a step towards a mean of the line, and it is applied
// once. Frames go out through
// an Outbox straight from the model and the Round's buffers; incoming frames are placed by land() before a byte of
// their payload is read: straight into the Round (a reduced chunk into its result, a contribution into its place
// among the peers'), anything else drained and counted. A newer round of a slot finishes the older one with what it has (BIDMach's
// catch-up); a newer line version's frame waits (its link stops reading) until start_line brings that version.
//
// It tells the actors (RoundEvent) when a round completes, and when a peer's frame started a round here, so that
// they arm its deadline. Not thread-safe: the data plane's thread owns it.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "allreduce/peer_patience.hpp"
#include "allreduce/round.hpp"
#include "allreduce/round_config.hpp"
#include "dataplane/frame.hpp"

namespace gridtrain::dataplane {

// Where a round's model comes from and where its result goes: the node's ParameterStore, behind functions, so that
// this library knows no learner. Called on the data plane's thread.
struct ModelAccess {
  std::size_t floats = 0;
  // The model's floats [offset, offset + into.size()) now, each tensor under its lock: one chunk's snapshot.
  std::function<void(std::size_t offset, std::span<float> into)> fetch;
  // The model's floats themselves, for a send to read as it goes out, with no lock and no copy: a delta is against
  // what arrived, so a value the learner changes meanwhile costs nothing. Used only for a peer whose frames no code
  // of ours reads (Outbox::kernel_reads_payload). Empty: each chunk is fetched first and sent from the Round's send
  // buffer.
  std::span<const float> memory;
  // The elastic update of the model's floats [begin, end) from the round's result where it has means, each tensor
  // under its lock (allreduce/elastic_update.hpp). Called once per chunk, as its mean comes.
  std::function<void(const allreduce::Round&, std::size_t begin, std::size_t end, float alpha)> update;
  // A chunk of our block folded (allreduce::Round::fold_target): over the model's floats [offset, offset + length),
  // each tensor under its lock, the chunk reduced with our values read from the model, the deltas (or the mean)
  // written and the elastic update applied, in one pass (allreduce::fold_chunk). Optional: without it every chunk
  // of our block is fetched, reduced and updated in three passes.
  std::function<void(std::size_t offset, std::size_t length, const allreduce::FoldTarget& target, float alpha)> fold;
  // The outer step (allreduce/outer_step.hpp) of the model's floats [begin, end), in place of `update` on a line
  // whose config says allreduce.outer nesterov (and then neither fold nor memory is used: the step needs our copy
  // of each chunk). A line of that config on an endpoint without it (or without fetch_outer) fails its rounds'
  // updates loudly. `anchor` holds, laid out as the model, the outer parameters fetched with each chunk.
  std::function<void(const allreduce::Round&, std::size_t begin, std::size_t end, std::span<const float> anchor,
                     allreduce::OuterRates rates)>
      outer;
  // The outer step's fetch: the model's floats as `fetch`, and the outer parameters o of the same floats into
  // `anchor`, under the same locks, so that a step landing between fetch and mean is counted once.
  std::function<void(std::size_t offset, std::span<float> into, std::span<float> anchor)> fetch_outer;
};

// The line a node is in, in one dimension, for one layout version.
struct LineSpec {
  std::uint64_t epoch = 0;
  std::uint64_t layout_version = 0;
  std::uint32_t dim = 0;
  std::uint64_t line = 0;
  std::vector<std::uint64_t> peers;  // node ids, in peer-index order
  std::uint32_t self_index = 0;
  allreduce::RoundConfig round;
  std::uint32_t rounds_in_flight = 0;  // k, from the line's settings (grid.rounds_in_flight); start_line refuses 0
};

// A frame's buffers belong to one slot of one dimension: retiring the slot retires them.
struct SlotTag {
  std::uint32_t dim = 0;
  std::uint32_t slot = 0;
  friend bool operator==(const SlotTag&, const SlotTag&) = default;
};

// What the runner sends through (the Endpoint's links, or a test's).
class Outbox {
 public:
  virtual ~Outbox() = default;
  // Queues a frame to `node`; `payload` is header.payload_bytes() long, in the header's wire format. It stays valid
  // and unchanged until the frame is written or retire(tag). `chunk` is the frame's chunk in its round: where a
  // peer is reached over several connections, each chunk keeps to one of them, so that its frames come in order.
  virtual void send(std::uint64_t node, const FrameHeader& header, std::span<const std::byte> payload, SlotTag tag,
                    std::uint32_t chunk) = 0;
  // The buffers of `tag` are about to be overwritten: frames not begun are dropped; the rest of one being written
  // is copied aside first.
  virtual void retire(SlotTag tag) = 0;
  // Whether only the kernel reads the payloads of frames to `node` (plain TCP), so that a payload may be memory
  // another thread writes meanwhile: not where this process's code reads them (TLS encrypts them on the data plane's
  // thread, an in-process peer's link copies them), which would race with the learner's writes.
  virtual bool kernel_reads_payload(std::uint64_t node) const = 0;
};

struct RoundEvent {
  enum class Kind : std::uint8_t {
    done,     // the round completed and its update is applied: tell the LineMaster
    started,  // a peer's frame started this round here before its StartRound came: arm its deadline
    waiting,  // its deadline came while its frames were still landing: arm it again, wait_ms from now
  };
  Kind kind = Kind::done;
  allreduce::RoundKey key;
  std::uint32_t self_index = 0;
  std::uint32_t chunks_missing = 0;  // done: chunks with no mean at completion
  std::uint32_t wait_ms = 0;         // waiting
};

// What one dimension counted; read from any thread.
struct DimensionCounters {
  std::atomic<std::uint64_t> rounds_done{0};       // completed, including those finished early by catch-up
  std::atomic<std::uint64_t> caught_up{0};         // finished early because a newer round of the line came
  std::atomic<std::uint64_t> abandoned{0};         // dropped unfinished because the line changed or was lost
  std::atomic<std::uint64_t> stale_dropped{0};     // frames of a round or line version left behind, drained
  std::atomic<std::uint64_t> malformed{0};         // frames that cannot belong to our line or round, drained
  std::atomic<std::uint64_t> quorum_shortfalls{0}; // rounds completed with a chunk over fewer than p, or missing
  std::atomic<std::uint64_t> silent_skipped{0};    // rounds that passed their deadline early: only silent peers missing
  std::atomic<std::uint64_t> late_probes{0};       // rounds that came to wait only on late peers: a probe started
  std::atomic<std::uint64_t> late_cut{0};          // rounds completed after their probe without the late peers
  std::atomic<std::uint64_t> frames_sent{0};
  std::atomic<std::uint64_t> bytes_sent{0};         // payload bytes
  std::atomic<std::uint64_t> bytes_received{0};     // payload bytes that counted
  std::atomic<std::uint64_t> frames_unsent{0};      // dropped before they were written: retired, or no link
  std::atomic<std::uint32_t> line_peers{0};         // nodes of the line now, this one included; 0 without a line
};

// Where the payload of a frame whose header was read goes.
struct Landing {
  enum class Kind : std::uint8_t {
    direct,   // straight into its place in the Round, `into` (a contribution, or a reduced chunk into the result)
    drain,    // read and thrown away (stale or malformed: counted)
    wait,     // a newer line version than this node has: stop reading until start_line brings it
    refuse,   // a length no line of ours can have: the link is closed
  };
  Kind kind = Kind::drain;
  // direct: the chunk's floats. An fp32 payload is read straight into them; a compressed one (the header's wire
  // format) into the reader's own buffer, which landed() decodes into them.
  std::span<float> into;
  std::uint32_t slot = 0;
  std::uint64_t round = 0;
  std::uint32_t chunk = 0;  // direct: the chunk
  // The runner's buffers at the time: a new line frees them, so a reader that finds generation() changed while the
  // payload comes reads the rest into nowhere.
  std::uint64_t generation = 0;
};

// Scatter chunks a round keeps out at once over all its peers, whose means have not come (at least one per peer:
// see above). Chosen by measurement: BENCHMARKS.md, "Chunk size and socket buffers". 8 was tried on shaped links
// ("Shaped links again"): +13% on a lossy link with 4 hosts, but with the default settings on a 100 Mbit/s, 80 ms
// link 21% of the rounds completed short of their quorum (0% with 4), so it stays 4.
inline constexpr std::size_t kScatterWindow = 4;

class LineRunner {
 public:
  LineRunner(std::uint32_t dim, std::uint64_t node_id, ModelAccess& model, Outbox& outbox,
             std::function<void(const RoundEvent&)> on_event, DimensionCounters& counters);

  // A new line (or a new version of ours): rounds of the old one are dropped without an update. A spec for another
  // dimension, or one older than the line we have, is ignored (false).
  bool start_line(LineSpec spec);
  // The node lost the cluster: no line until the next start_line. With a version: only a line older than it.
  void drop_line(std::optional<std::pair<std::uint64_t, std::uint64_t>> older_than = std::nullopt);
  void start_round(const allreduce::RoundKey& key);
  // The round's quorum timeout T (the line's quorum_timeout_ms) has passed since the actors armed it. It passes
  // only once the line has gone T without a frame landing, of this round or another in flight: where one landed
  // within T, the line's links are still carrying its rounds (a slow link carries the chunks of a large round, and
  // of the rounds in flight before it, one after the other for much longer than T), and a RoundEvent waiting asks
  // for the deadline again when T will have passed since that frame. A round whose probe for late peers is over
  // (see skip_absent) passes it at once, frames landing or not: they are the late peers'.
  void deadline(const allreduce::RoundKey& key);

  // The header of a frame from node `sender` was read: where its payload goes. Nothing changes for a wait or a
  // refuse. A frame whose `from` is not the sender's index in our line is malformed.
  Landing land(std::uint64_t sender, const FrameHeader& header);
  // Bytes of a frame's payload came (of any round of ours, to be kept or drained): the line's links are carrying
  // it, even where a frame takes longer than the quorum timeout (a 1 MB chunk at a few Mbit/s; TCP's slow phases).
  void receiving() { last_landing_ = std::chrono::steady_clock::now(); }
  // Its payload is where land() said; a compressed one is in `staged`, header.payload_bytes() long, and is decoded
  // here. A payload that does not decode (a bad length, scale or value) is counted malformed and does not count:
  // the round goes on as if that peer's frame had not come.
  void landed(const FrameHeader& header, const Landing& landing, std::span<const std::byte> staged = {});

  // The line version this runner holds, if any: a waiting frame of a newer one waits for start_line.
  std::optional<std::pair<std::uint64_t, std::uint64_t>> version() const;
  const LineSpec* line() const { return line_ ? &*line_ : nullptr; }
  // Raised whenever the Rounds' buffers are freed (a new line, a dropped one): see Landing::generation.
  std::uint64_t generation() const { return generation_; }
  // The most floats a frame of ours may carry: the line's max_chunk_floats (0 without a line).
  std::size_t max_frame_floats() const { return line_ ? line_->round.max_chunk_floats : 0; }

 private:
  struct Slot {
    std::optional<allreduce::Round> round;
    bool active = false;  // `round` holds a round of this line that has started (fetched and scattered)
    bool done = false;    // it completed and its RoundDone was told
    std::uint32_t applied = 0;  // of round->means_in_order(): the chunks whose update is applied
    bool reshape = false;  // `round` was cut for an older line version: reshape it before its next round
    std::vector<std::uint8_t> fetched;  // per chunk: kFetched, kFolded or 0
    std::vector<float> anchor;          // allreduce.outer nesterov: the outer parameters fetched with each chunk
    // A compressed line: our scatter chunks encoded as each goes out, chunk c at wire_at[c] (its own block's unused).
    std::vector<std::byte> wire_out;
    std::vector<std::size_t> wire_at;
    std::vector<allreduce::Send> held;  // our scatter chunks, by peer, in chunk order (capacity kept)
    std::vector<std::size_t> next;      // per peer: its next chunk in held
    std::vector<std::size_t> end;       // per peer: the end of its chunks in held
    std::vector<std::uint8_t> heard;    // per peer: some frame of it counted in this round (ours: always)
    // Its timing, for allreduce::PeerPatience::round_timed: when it started here, and per peer microseconds from
    // then to its last part counted (kUnheard: none, or a part still missing when the round was made to complete).
    std::chrono::steady_clock::time_point started;
    std::vector<std::int64_t> done_us;
    // Timeout mode: when the round came to wait only on late peers, the end of its probe (then it completes).
    std::optional<std::chrono::steady_clock::time_point> probe_end;
  };

  void abandon_all();
  // Makes `key`'s round current in its slot, finishing an older one first; false if `key` is older than the slot's.
  bool enter(const allreduce::RoundKey& key, bool from_peer);
  void send_all(std::uint32_t slot, std::span<const allreduce::Send> sends);
  // The chunk's snapshot, copied from the model unless it already was this round.
  void fetch(std::uint32_t slot, std::uint32_t chunk);
  // Every chunk of our own block: before the Round may reduce them without a contribution coming (scatter() with a
  // quorum of one, deadline_passed(), finish()).
  void fetch_own_block(std::uint32_t slot);
  // In quorum mode timeout, a round whose only missing parts are silent peers' (allreduce/peer_patience.hpp)
  // passes its deadline now rather than waiting for it; one whose only missing parts are late or silent peers'
  // starts its probe (a RoundEvent waiting), and passes its deadline when deadline() finds the probe over.
  void skip_absent(std::uint32_t slot);
  // Asks the actors for the round's deadline again `after` from now (a RoundEvent waiting; at least 1 ms).
  void ask_deadline_in(const allreduce::RoundKey& key, std::chrono::steady_clock::duration after);
  // Reduces each chunk of our block that waits only on `absent` peers' contributions, sends its mean, and
  // completes the round if that was all it waited for.
  void reduce_block_without(std::uint32_t slot, std::span<const std::uint8_t> absent);
  // The round's probe is over: our block's chunks that wait only on late peers are reduced without them, and the
  // round completes if it waits only on them.
  void cut_late(std::uint32_t slot);
  // The round is made to complete (its deadline, its probe): the deadline's reduce and completion, after
  // time_missing_as_unheard.
  void force_complete(std::uint32_t slot);
  // A round made to complete (force_complete, or a newer round of its slot): a peer whose contribution to our block
  // is still missing is timed as unheard.
  void time_missing_as_unheard(std::uint32_t slot);
  // Sends up to `n` more held scatter chunks to peer `to`, each fetched first; skips those whose mean came anyway.
  void release(std::uint32_t slot, std::uint32_t to, std::size_t n);
  // Applies the updates of the slot's new means; tells RoundDone once the round is complete.
  void complete_if_done(std::uint32_t slot);
  bool same_version(const allreduce::RoundKey& key) const;

  std::uint32_t dim_;
  std::uint64_t node_id_;
  ModelAccess& model_;
  Outbox& outbox_;
  std::function<void(const RoundEvent&)> on_event_;
  DimensionCounters& counters_;
  std::optional<LineSpec> line_;
  allreduce::PeerPatience patience_;  // which peers of the line went silent, or come late
  std::vector<std::uint8_t> waiting_;  // force_complete()'s scratch: per peer, a part of it missing
  std::vector<Slot> slots_;
  // The newest version this runner held or dropped: without a line, a frame of it or older is stale, a newer one
  // waits for its line.
  std::pair<std::uint64_t, std::uint64_t> floor_{0, 0};
  std::uint64_t generation_ = 0;
  // When a frame of this line (of any of its rounds), or bytes of one, last came; none yet: unset.
  std::optional<std::chrono::steady_clock::time_point> last_landing_;
  // A compressed line's error feedback: per float of the model, what encoding our contributions dropped, added to
  // the next contribution of that float. Kept across lines, since it is this node's, whichever peer owns the chunk
  // now; zero for a node that starts (it has sent nothing).
  std::vector<float> residual_;
  // And the means of our blocks' chunks, which we encode for the line (allreduce::Round::feed_back_means).
  std::vector<float> mean_residual_;
};

}  // namespace gridtrain::dataplane
