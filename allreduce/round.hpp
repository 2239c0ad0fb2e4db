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
// so its pages cost memory only once they are written. The Round's block accumulator grows when a line shrinks
// (a larger block) and, with 2 peers, is never written at all (the last contribution is reduced straight into the
// mean): zero-filled, it stepped a node's resident memory up by the growth (22 MB at 16 M floats, 3 peers to 2).
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

// Where the payload of a reduced chunk goes when it is read straight into the result (reduced_target()): the
// verdict on its header and, when accepted, the chunk and its place in result().
struct ReducedTarget {
  Verdict verdict = Verdict::accepted;
  std::uint32_t chunk = 0;
  std::span<float> into;
};

// Where a contribution that Round::fold_target() accepts is reduced: the chunk, the sender, the chunk's mean in
// result(), the sum of the contributions before it (empty where there were none but ours) and 1/n, for
// mean = ((sum + ours) + theirs)·(1/n).
struct FoldTarget {
  std::uint32_t chunk = 0;
  std::uint32_t from = 0;
  std::span<float> mean;
  std::span<const double> sum;  // the other contributions' sum, none with two peers
  double inv = 0;
};

// One allreduce round of BIDMach (Algorithm 1 of the paper) among the p peers of a line, seen
// from peer `self`, as a state machine with no I/O: the caller moves the messages and the clock.
//
//   Round round = Round::create(key, n, peers, self, config).value();
//   copy the model into round.send_buffer();            // 1. fetch (or chunk by chunk: see send_buffer())
//   send(round.scatter());                             // 2. scatter
//   for each message: send(round.on_scatter(m).sends)  // 3. reduce, and send the mean
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
// Memory is O(N): send buffer, result buffer, and a double accumulator for our block, allocated by create() and
// kept by reset(), which starts the next round of the same line in the same buffers: a round allocates and
// zero-fills nothing (the accumulator takes each chunk's first contribution by assignment).
// Not thread-safe: one owner drives it.
class Round {
 public:
  // The round, or why there is none: peers == 0, self >= peers, or sizes the Partition rejects. It uses the
  // config's thresholds θr and θc, its quorum mode and max_chunk_floats (the rest is the caller's: α, θa, the
  // timeout's clock).
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

  // 1. Fetch: the caller fills this with the model (N floats), tensor by tensor under its locks. All of it before
  // scatter(), or chunk by chunk: a chunk of another block before its Send goes out, a chunk of our block before
  // the Round reduces it (an on_scatter() that reduces it: reduces_with(); scatter() when our values alone are a
  // quorum; deadline_passed(), finish()), except a chunk that is folded (fold_target()). The data plane does the
  // latter (dataplane/line_runner.hpp).
  std::span<float> send_buffer() { return send_; }
  std::span<const float> send_buffer() const { return send_; }

  // 2. Scatter: what to send to each peer, block j to peer j, starting at peer self + 1; plus the
  // reduced chunks of our block if our own contribution already makes a quorum.
  // A second call returns nothing.
  std::span<const Send> scatter();

  // 3. Reduce: a contribution to a chunk of our block. Once a quorum of contributions is in, the
  // mean goes out to every other peer.
  Outcome on_scatter(const ScatterChunk& chunk);

  // Whether on_scatter(in) would reduce its chunk now (so that our values must be in send_ first). Counts nothing.
  bool reduces_with(const ScatterChunk& in) const;

  // 3, folded. Whether `in` is the last contribution its chunk waits for (every other peer's is in, ours counted by
  // scatter() and read only at the reduce): then a caller that has not copied our values into send_ for the chunk
  // may, instead, read them from the model, write the mean and apply the chunk's elastic update in one pass
  // (allreduce::fold_contribution) and report it with folded(). One pass over the chunk rather than three
  // (snapshot, mean, update), and send_ is not read for it. Changes and counts nothing: where it says no, the
  // caller fills send_ (where reduces_with(in)) and calls on_scatter(), which judges `in` as ever.
  std::optional<FoldTarget> fold_target(const ScatterChunk& in);
  // REQUIRES: fold_target(in) gave `target`, its mean is written, and nothing since has changed the round.
  Outcome folded(const FoldTarget& target);

  // 4./5. Gather and complete: the mean of a chunk of another peer's block.
  Outcome on_reduced(const ReducedChunk& chunk);
  // The same in two steps, for a payload read straight into the result: first the verdict on the header (counted
  // as on_reduced counts it) and where the payload goes; once it is there, reduced_arrived() counts it. A payload
  // that lands and is not counted changes nothing: result() is meaningful only where count() > 0.
  ReducedTarget reduced_target(const RoundKey& key, std::uint32_t from, std::size_t offset, std::size_t length,
                               std::uint32_t count);
  // REQUIRES: reduced_target() accepted `chunk` with `count`, and nothing since has reset() the round.
  Outcome reduced_arrived(std::uint32_t chunk, std::uint32_t count);

  // The quorum timeout has passed (measured by the caller): in timeout mode, a quorum is now
  // enough for the reduce and for completion. In fraction mode it changes nothing.
  std::span<const Send> deadline_passed();

  // Complete now with what has arrived (BIDMach's catchUp, when a newer round key shows up).
  // Every chunk of our block with at least one contribution is reduced and sent, even below
  // q_r: this round gets no other chance to send it, and a mean over fewer peers, with its count,
  // serves the peers better than no update at all.
  std::span<const Send> finish();

  bool started() const { return started_; }
  bool complete() const { return complete_; }

  // The result: the mean for chunk c, averaged over count(c) contributions; 0 means no mean came,
  // so that slice gets no update.
  // REQUIRES: c < partition().chunk_count()
  std::uint32_t count(std::uint32_t c) const { return counts_[c]; }
  std::uint32_t received_chunks() const { return static_cast<std::uint32_t>(mean_order_.size()); }
  // The chunks that have a mean, in the order their means came (ours, reduced, and others', received), so that a
  // caller can apply each chunk's update as soon as its mean is here, while the data is still in the cache, rather
  // than in one pass over the whole model at completion. It grows after completion too: our own block's chunks
  // are still reduced for slower peers.
  std::span<const std::uint32_t> means_in_order() const { return mean_order_; }
  std::span<const float> result() const { return result_; }  // N floats; meaningful where count > 0

  // Calls fn(offset, mean) for each maximal run of chunks in [begin, end) that have a mean; offset
  // is absolute and mean a span into the result.
  // REQUIRES: begin <= end <= partition().model_floats()
  template <class Fn>
  void for_each_received(std::size_t begin, std::size_t end, Fn&& fn) const;
  template <class Fn>
  void for_each_received(Fn&& fn) const {
    for_each_received(0, partition_.model_floats(), static_cast<Fn&&>(fn));
  }

  const RoundCounters& counters() const { return counters_; }

 private:
  Round(RoundKey key, Partition partition, std::uint32_t self, const RoundConfig& config);

  bool quorum_met(std::uint32_t arrived, std::uint32_t needed, std::uint32_t all) const;
  // The verdict on a message's round key alone; check_key() counts it too.
  Verdict key_verdict(const RoundKey& key) const;
  Verdict check_key(const RoundKey& key);
  // Counts v in counters_ (nothing for accepted) and returns it.
  Verdict counted(Verdict v);
  // The chunk's mean, over its stored sum; with `last`, over the sum plus `last` (the last contribution).
  void reduce(std::uint32_t c, std::span<const float> last = {});
  // Chunk c has its mean, over its contributions so far, in result_: counted, and sent to every other peer.
  void mean_written(std::uint32_t c);
  // The checks on_scatter() makes before it takes a contribution: our block's chunk `in` adds to, or the verdict.
  // Counts nothing.
  Verdict judge(const ScatterChunk& in, std::uint32_t& chunk) const;
  void complete_if_quorum();
  // Our index, the settings and what follows from them and partition_; buffers sized to match (capacity kept).
  void configure(std::uint32_t self, const RoundConfig& config);
  // Adds a contribution to chunk k of our block (its first one is assigned, so sum_ needs no zeroing).
  void accumulate(std::uint32_t k, std::size_t offset, std::span<const float> values);

  RoundKey key_;
  Partition partition_;
  // Set by configure():
  std::uint32_t self_ = 0;
  QuorumMode mode_ = QuorumMode::timeout;
  std::uint32_t reduce_quorum_ = 0;
  std::uint32_t complete_quorum_ = 0;
  Range block_{};                  // our block, absolute
  std::uint32_t first_chunk_ = 0;  // of our block

  // The buffers of N floats (and our block's sum) are large buffers: huge pages, for the passes over them.
  LargeBuffer<float> send_;                   // s
  std::vector<double, UninitializedAllocator<double>> sum_;  // r, summed: exact for any arrival order
  std::vector<std::uint32_t> contributions_;  // per chunk of our block
  std::vector<std::uint8_t> summed_;       // per chunk of our block: sum_ holds other peers' contributions
  std::vector<std::uint8_t> contributed_;     // [chunk of our block][peer]: duplicates are not counted twice
  LargeBuffer<float> result_;                 // g
  std::vector<std::uint32_t> counts_;         // per chunk; 0 = no mean (yet)
  std::vector<std::uint32_t> mean_order_;     // the chunks with count > 0, in arrival order (capacity C, kept)

  bool started_ = false;
  bool deadline_passed_ = false;
  bool complete_ = false;
  bool finished_ = false;
  std::vector<Send> outbox_;  // reused, so a message costs no allocation
  RoundCounters counters_;
};

template <class Fn>
void Round::for_each_received(std::size_t begin, std::size_t end, Fn&& fn) const {
  if (begin >= end) return;
  // Neighbouring chunks lie next to each other in result_, so a run of them is one span.
  std::size_t run_begin = begin;
  bool in_run = false;
  for (std::uint32_t c = partition_.chunk_containing(begin); c < partition_.chunk_count(); ++c) {
    const Range r = partition_.chunk(c);
    if (r.offset >= end) break;
    if (counts_[c] > 0) {
      if (!in_run) run_begin = std::max(r.offset, begin);
      in_run = true;
    } else if (in_run) {
      fn(run_begin, std::span<const float>(result_).subspan(run_begin, r.offset - run_begin));
      in_run = false;
    }
  }
  if (in_run) {
    const std::size_t run_end = std::min(end, partition_.model_floats());
    fn(run_begin, std::span<const float>(result_).subspan(run_begin, run_end - run_begin));
  }
}

}  // namespace gridtrain::allreduce
