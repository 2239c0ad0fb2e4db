#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "allreduce/messages.hpp"
#include "allreduce/partition.hpp"
#include "allreduce/quorum.hpp"
#include "allreduce/round_config.hpp"
#include "allreduce/round_key.hpp"
#include "base/large_buffer.hpp"
#include "base/result.hpp"

namespace gridtrain::allreduce {

// An allocator whose resize() leaves new elements uninitialized: a buffer that grows writes nothing into the growth,
// so its pages cost memory only once they are written. The Round's buffers grow when a line changes, and parts of
// them are never written (our values for other peers' blocks, where they go out straight from the model): zero-
// filled, a growth stepped a node's resident memory up by its size (22 MB at 16 M floats, 3 peers to 2).
// Its memory is a large buffer's (base/large_buffer.hpp): on huge pages from 2 MB.
template <class T>
struct UninitializedAllocator : LargeBufferAllocator<T> {
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialization: nothing written for a double
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

template <class T>
using UninitializedBuffer = std::vector<T, UninitializedAllocator<T>>;

// What went wrong in a round, for metrics.
struct RoundCounters {
  std::uint64_t late = 0;       // contributions or reduced chunks that came after they could count
  std::uint64_t duplicate = 0;
  std::uint64_t stale = 0;
  std::uint64_t newer = 0;
  std::uint64_t malformed = 0;
  std::uint64_t short_reductions = 0;        // chunks of our block averaged over fewer than p
  std::uint64_t missing_at_completion = 0;  // chunks with no mean when the round completed
};

// The verdict on one incoming message, and what to send because of it. `sends` is valid until
// the next call on the Round.
struct Outcome {
  Verdict verdict = Verdict::accepted;
  std::span<const Send> sends;
};

// Where the payload of an incoming chunk goes, read straight into the Round's buffers (contribution_target(),
// reduced_target()): the verdict on its header and, when accepted, the chunk and the place for its payload.
struct PayloadTarget {
  Verdict verdict = Verdict::accepted;
  std::uint32_t chunk = 0;
  std::span<float> into;
};

// A chunk of our block that Round::fold_target() lets the caller reduce over the model (allreduce::fold_chunk): the
// chunk, the sender of its last contribution, every other peer's contribution (from its first float, in peer
// order; valid until the next call on the Round), 1/p, and where the results go: each peer's delta in place of its
// contribution, or (without deltas, α = 1) the mean into `mean`, the chunk's place in result().
struct FoldTarget {
  std::uint32_t chunk = 0;
  std::uint32_t from = 0;
  std::span<float* const> theirs;
  double inv = 0;
  bool deltas = true;
  std::span<float> mean;  // empty with deltas
};

// One allreduce round of BIDMach (Algorithm 1 of the paper) among the p peers of a line, seen
// from peer `self`, as a state machine with no I/O: the caller moves the messages and the clock.
//
//   Round round = Round::create(key, n, peers, self, config).value();
//   copy the model into round.send_buffer();            // 1. fetch (or chunk by chunk: see send_buffer())
//   send(round.scatter());                             // 2. scatter
//   for each message: send(round.on_scatter(m).sends)  // 3. reduce, and send the mean (or each peer's delta)
//                 or: send(round.on_reduced(m).sends)  // 4. gather, 5. complete
//   at the quorum timeout: send(round.deadline_passed());
//   on Verdict::newer: send(round.finish());
//   once round.complete(): elastic_update(model slice, offset, round, alpha), tensor by tensor;
//   or, chunk by chunk as each mean comes: means_in_order() lists them (the data plane does this).
//   Where a contribution is the last one its chunk waits for, the data plane folds it instead: fold_target(), then
//   one pass over the model, folded().
//
// Nothing is reduced and the round does not complete before scatter() (unless finish() forces
// it): until then our own contribution is missing. Messages that come earlier are kept and count.
// A model of 0 floats has no chunks (C == 0): the round completes at scatter().
//
// Once complete, the round keeps reducing its own block as contributions arrive, so that slower
// peers still get the mean from us; reduced chunks that arrive after completion are late. After
// finish() everything is late.
//
// The owner of a chunk answers each peer whose contribution it counts with a delta, the mean less that
// contribution as it came, and each other peer with the mean: so a peer needs no copy of what it sent to apply its
// update (elastic_update), and may send straight from a model that moves meanwhile. The owner keeps each peer's
// contribution until the chunk is reduced, and writes its delta in its place. Except with α = 1 (deltas() false):
// the mean goes to every peer, which then needs its copy, so that every peer's model becomes the same floats.
//
// On a line whose wire format is not fp32 (RoundConfig::wire), every mean must be the same floats on every peer
// although it travels compressed: the owner encodes each chunk's mean once (Send::wire), for every peer, and keeps
// in result() what those bytes decode to, so that its own update applies exactly what the peers decode. There are
// no deltas then (each peer's would be encoded apart), and no folds (the mean must be encoded before it is applied).
// With feed_back_means(), what encoding a mean dropped is added to the next mean of those floats (error feedback
// on the owner's side too), so that the means every node applies, summed over rounds, drift from the exact ones by
// one encoding's error at most, not by a random walk.
//
// Memory is O(N): send buffer, result buffer, and our block's contributions from the p - 1 other peers, allocated
// by create() and kept by reset(), which starts the next round of the same line in the same buffers: a round
// allocates and zero-fills nothing.
// Not thread-safe: one owner drives it.
class Round {
 public:
  // The round, or why there is none: peers == 0, self >= peers, or sizes the Partition rejects. It uses the
  // config's thresholds θr and θc, its quorum mode, max_chunk_floats, and whether α is 1 (deltas(); the rest is
  // the caller's: α itself, θa, the timeout's clock).
  static Result<Round> create(RoundKey key, std::size_t model_floats, std::uint32_t peers, std::uint32_t self,
                              const RoundConfig& config);
  // The next round of a new line version (other peers, our index, settings) in this Round's buffers: they keep
  // their capacity, so a line that changes allocates only where a buffer must grow (our block, when the line
  // shrinks), and a node's memory does not step up at each change. Errors as create()'s; the Round is unchanged.
  Status reshape(RoundKey key, std::size_t model_floats, std::uint32_t peers, std::uint32_t self,
                 const RoundConfig& config);
  // Copying would leave Sends pointing into the original's buffers.
  Round(const Round&) = delete;
  Round& operator=(const Round&) = delete;
  // Moving keeps every Send's data valid: the buffers stay where they are on the heap.
  Round(Round&&) = default;
  Round& operator=(Round&&) = default;

  // Starts round `key` of the same line and model in these buffers: what the last round received, sent and
  // counted is forgotten (its Sends' data is overwritten by the next fetch and reduce). Counters start at 0.
  void reset(const RoundKey& key);

  const RoundKey& key() const { return key_; }
  const Partition& partition() const { return partition_; }
  std::uint32_t self() const { return self_; }
  std::uint32_t peers() const { return partition_.peers(); }
  std::uint32_t reduce_quorum() const { return reduce_quorum_; }      // q_r = quorum(theta_r, p)
  std::uint32_t complete_quorum() const { return complete_quorum_; }  // q_c = quorum(theta_c, C)
  // Whether a peer whose contribution counted gets a delta (α < 1); else the mean, and the update needs our copy of
  // the chunk in send_buffer(): s + (mean − s) is the mean only within a rounding, and with α = 1 the peers' models
  // must come out the same floats.
  bool deltas() const { return deltas_; }

  // 1. Fetch: our values (N floats), tensor by tensor under the model's locks: all before scatter(), or chunk by
  // chunk: a chunk of another block before its Send goes out (unless scatter() was given the model itself, with
  // deltas()) or at the latest before its update where it got the mean, a chunk of our block before the Round
  // reduces it (a contribution that reduces it: reduces_with(); scatter() when our values alone are a quorum;
  // deadline_passed(), finish()), except a chunk that is folded (fold_target()). The data plane does the latter
  // (dataplane/line_runner.hpp).
  std::span<float> send_buffer() { return send_; }
  std::span<const float> send_buffer() const { return send_; }

  // 2. Scatter: what to send to each peer, block j to peer j, starting at peer self + 1, read from `ours` (N floats:
  // send_buffer(), or with deltas() the model itself, read as each Send goes out, since a delta is against what
  // arrived); plus the reduced chunks of our block if our own contribution already makes a quorum. A second call
  // returns nothing.
  // REQUIRES: ours.size() == partition().model_floats()
  std::span<const Send> scatter(std::span<const float> ours);
  std::span<const Send> scatter() { return scatter(send_); }

  // 3. Reduce: a contribution to a chunk of our block. Once a quorum of contributions is in, the chunk's mean goes
  // out: as a delta to each peer whose contribution it counts, as the mean to the others.
  Outcome on_scatter(const ScatterChunk& chunk);
  // The same in two steps, for a payload read straight into the Round: first the verdict on the header (counted
  // as on_scatter counts it) and where the payload goes; once it is there, contribution_arrived() counts it.
  PayloadTarget contribution_target(const RoundKey& key, std::uint32_t from, std::size_t offset,
                                    std::size_t length);
  // REQUIRES: contribution_target() accepted `chunk` from `from`, its payload is in place, and nothing since has
  // reset() the round.
  Outcome contribution_arrived(std::uint32_t chunk, std::uint32_t from);

  // Whether contribution_arrived(chunk, from) would reduce the chunk now (so that our values must be in send_
  // first). Counts nothing.
  bool reduces_with(std::uint32_t chunk, std::uint32_t from) const;

  // 3, folded. Whether the contribution of `from`, in place, is the last one its chunk waits for (every other
  // peer's is in, ours counted by scatter() and read only at the reduce): then a caller that has not copied our
  // values into send_ for the chunk may, instead, reduce the chunk over the model (allreduce::reduce_chunk: our
  // values read, the deltas written and the chunk's elastic update applied in one pass) and report it with
  // folded(). One pass over the chunk rather than three (snapshot, reduce, update), and send_ is not read for it.
  // Changes and counts nothing: where it says no, the caller fills send_ (where reduces_with()) and calls
  // contribution_arrived(), which judges the contribution as ever. result() gets no mean for a folded chunk: no
  // peer needs it, since every peer's contribution counted.
  std::optional<FoldTarget> fold_target(std::uint32_t chunk, std::uint32_t from);
  // REQUIRES: fold_target() gave `target`, the chunk is reduced as it says, and nothing since has changed the round.
  Outcome folded(const FoldTarget& target);

  // 4./5. Gather and complete: a chunk of another peer's block, reduced (its mean, or a delta).
  Outcome on_reduced(const ReducedChunk& chunk);
  // The same in two steps, for a payload read straight into the result: first the verdict on the header (counted
  // as on_reduced counts it) and where the payload goes; once it is there, reduced_arrived() counts it. A payload
  // that lands and is not counted changes nothing: result() is meaningful only where count() > 0.
  PayloadTarget reduced_target(const RoundKey& key, std::uint32_t from, std::size_t offset, std::size_t length,
                               std::uint32_t count, bool delta);
  // REQUIRES: reduced_target() accepted `chunk` with `count`, and nothing since has reset() the round.
  Outcome reduced_arrived(std::uint32_t chunk, std::uint32_t count, bool delta);

  // The quorum timeout has passed (measured by the caller): in timeout mode, a quorum is now
  // enough for the reduce and for completion. In fraction mode it changes nothing.
  std::span<const Send> deadline_passed();
  // Whether every part the round still waits for is a peer's with absent[peer] != 0: a chunk of that peer's block
  // with no mean yet, or that peer's contribution to a chunk of our block not reduced yet (allreduce/peer_patience.hpp:
  // then the round need not wait for its deadline). False for a round not started, or complete. Counts nothing.
  // REQUIRES: absent.size() == partition().peers()
  bool waits_only_on(std::span<const std::uint8_t> absent) const;
  // Per peer, 1 where a chunk of our block with no mean yet still lacks its contribution, else 0 (all 0 for a round
  // not started, or complete). What the round waits for from a peer itself: the other owners' means wait, in turn,
  // on every peer's contributions. Counts nothing.
  // REQUIRES: out.size() == partition().peers()
  void missing_contributions(std::span<std::uint8_t> out) const;
  // Whether each chunk of our block still without a mean would be reduced by reduce_without(absent) now, and there
  // is one: our block waits only on absent peers' contributions. Counts nothing.
  bool block_waits_only_on(std::span<const std::uint8_t> absent) const;
  // Whether reduce_without(absent) would reduce chunk c now (so that our values must be in send_ first): a chunk of
  // our block with no mean yet, its reduce quorum in, and only absent peers' contributions missing. Counts nothing.
  bool reduces_without(std::uint32_t c, std::span<const std::uint8_t> absent) const;
  // Reduces each chunk of our block that reduces_without(absent) names, as the deadline would; completes nothing
  // (waits_only_on() and deadline_passed() do).
  // REQUIRES: absent.size() == partition().peers(); our values for those chunks in send_buffer()
  std::span<const Send> reduce_without(std::span<const std::uint8_t> absent);

  // Complete now with what has arrived (BIDMach's catchUp, when a newer round key shows up).
  // Every chunk of our block with at least one contribution is reduced and sent, even below
  // q_r: this round gets no other chance to send it, and a mean over fewer peers, with its count,
  // serves the peers better than no update at all.
  std::span<const Send> finish();

  // A compressed line's error feedback for our block's means: model-sized (indexed as the model), kept by the
  // caller across rounds and lines, valid while this Round may reduce. Empty: none.
  void feed_back_means(std::span<float> residual) { mean_residual_ = residual; }

  bool started() const { return started_; }
  bool complete() const { return complete_; }

  // The result: for chunk c, reduced over count(c) contributions, the mean, or where delta(c) the mean less our
  // contribution (a chunk of another peer's block that counted ours); count 0 means nothing came, so that slice
  // gets no update. A folded chunk of our block has a count and no mean here (its update is applied).
  // REQUIRES: c < partition().chunk_count()
  std::uint32_t count(std::uint32_t c) const { return counts_[c]; }
  bool delta(std::uint32_t c) const { return delta_[c] != 0; }
  std::uint32_t received_chunks() const { return static_cast<std::uint32_t>(mean_order_.size()); }
  // The chunks that have a mean, in the order their means came (ours, reduced, and others', received), so that a
  // caller can apply each chunk's update as soon as its mean is here, while the data is still in the cache, rather
  // than in one pass over the whole model at completion. It grows after completion too: our own block's chunks
  // are still reduced for slower peers.
  std::span<const std::uint32_t> means_in_order() const { return mean_order_; }
  std::span<const float> result() const { return result_; }  // N floats; meaningful where count > 0

  const RoundCounters& counters() const { return counters_; }

 private:
  Round(RoundKey key, Partition partition, std::uint32_t self, const RoundConfig& config);

  bool quorum_met(std::uint32_t arrived, std::uint32_t needed, std::uint32_t all) const;
  // The verdict on a message's round key alone; check_key() counts it too.
  Verdict key_verdict(const RoundKey& key) const;
  Verdict check_key(const RoundKey& key);
  // Counts v in counters_ (nothing for accepted) and returns it.
  Verdict counted(Verdict v);
  // The chunk's mean over its contributions, into result_, and each contributing peer's delta in its place.
  void reduce(std::uint32_t c);
  // Chunk c is reduced over its contributions so far: counted, and sent to every other peer.
  void reduced(std::uint32_t c);
  // The checks made before a contribution is taken: our block's chunk it is for, or the verdict. Counts nothing.
  Verdict judge(const RoundKey& key, std::uint32_t from, std::size_t offset, std::size_t length,
                std::uint32_t& chunk) const;
  // Whether every contribution to chunk k of our block not in yet is an absent peer's (absent[peer] != 0).
  bool missing_only(std::uint32_t k, std::span<const std::uint8_t> absent) const;
  // Collects into theirs_ where chunk c's contributions from the other peers lie, in peer order: those counted, and
  // `also`'s.
  void collect_theirs(std::uint32_t c, std::optional<std::uint32_t> also = std::nullopt);
  // Where peer `from`'s contribution to chunk c of our block lies. REQUIRES: from != self_
  std::span<float> contribution(std::uint32_t c, std::uint32_t from);
  void complete_if_quorum();
  // Our index, the settings and what follows from them and partition_; buffers sized to match (capacity kept).
  void configure(std::uint32_t self, const RoundConfig& config);

  RoundKey key_;
  Partition partition_;
  // Set by configure():
  std::uint32_t self_ = 0;
  QuorumMode mode_ = QuorumMode::timeout;
  bool deltas_ = true;
  WireFormat wire_ = WireFormat::fp32;
  std::uint32_t reduce_quorum_ = 0;
  std::uint32_t complete_quorum_ = 0;
  Range block_{};                  // our block, absolute
  std::uint32_t first_chunk_ = 0;  // of our block

  // The buffers of N floats (and our block's contributions) are large buffers: huge pages, for the passes over
  // them. Uninitialized: every float is written before it is read.
  UninitializedBuffer<float> send_;      // s
  UninitializedBuffer<float> received_;  // r: [other peer q][our block], q = from less one past self_
  std::vector<std::uint32_t> contributions_;  // per chunk of our block
  std::vector<std::uint8_t> contributed_;     // [chunk of our block][peer]: duplicates are not counted twice
  std::vector<float*> theirs_;                // collect_theirs()'s (capacity p − 1, kept)
  UninitializedBuffer<float> result_;    // g
  std::vector<std::uint32_t> counts_;         // per chunk; 0 = no mean (yet)
  std::vector<std::uint8_t> delta_;           // per chunk: result_ holds a delta
  std::vector<std::uint32_t> mean_order_;     // the chunks with count > 0, in arrival order (capacity C, kept)
  // wire_ not fp32: our block's means encoded, chunk k of our block at wire_offsets_[k].
  UninitializedBuffer<std::byte> wire_means_;
  std::vector<std::size_t> wire_offsets_;
  std::span<float> mean_residual_;

  bool started_ = false;
  bool deadline_passed_ = false;
  bool complete_ = false;
  bool finished_ = false;
  std::vector<Send> outbox_;  // reused, so a message costs no allocation
  RoundCounters counters_;
};

}  // namespace gridtrain::allreduce
