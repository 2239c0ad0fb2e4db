#include "allreduce/round.hpp"

#include <algorithm>

#include "allreduce/elastic_update.hpp"

namespace gridtrain::allreduce {

namespace {

// The partition of a round with these sizes, or why there is none.
Result<Partition> round_partition(std::size_t model_floats, std::uint32_t peers, std::uint32_t self,
                                  const RoundConfig& config) {
  auto partition = Partition::create(model_floats, peers, config.max_chunk_floats);
  if (!partition) return partition.error();
  if (self >= peers) return Error{.message = "round: our index must be below the number of peers"};
  return partition;
}

}  // namespace

Result<Round> Round::create(RoundKey key, std::size_t model_floats, std::uint32_t peers, std::uint32_t self,
                            const RoundConfig& config) {
  auto partition = round_partition(model_floats, peers, self, config);
  if (!partition) return partition.error();
  return Round(key, std::move(partition).value(), self, config);
}

// Algorithm 1, line 1: create buffers s, r and g. Everything is sized here, once; handling a
// message allocates nothing beyond the outbox's first growth.
Round::Round(RoundKey key, Partition partition, std::uint32_t self, const RoundConfig& config)
    : key_(key), partition_(std::move(partition)) {
  configure(self, config);
}

void Round::configure(std::uint32_t self, const RoundConfig& config) {
  self_ = self;
  mode_ = config.quorum;
  // The owner sends each peer its delta (mean - its values) for the elastic update at α < 1, which adds α·delta;
  // the outer step needs the mean itself; so does a compressed line, whose owner encodes each mean once for all.
  wire_ = config.wire;
  deltas_ = config.outer == OuterMode::elastic && config.elastic_rate != 1.0 && wire_ == WireFormat::fp32;
  reduce_quorum_ = quorum(config.reduce_threshold, partition_.peers());
  complete_quorum_ = quorum(config.complete_threshold, partition_.chunk_count());
  block_ = partition_.block(self);
  first_chunk_ = partition_.first_chunk(self);
  const std::uint32_t peers = partition_.peers();
  const std::size_t model_floats = partition_.model_floats();
  const std::uint32_t our_chunks = partition_.chunks_in_block(self_);
  // resize, not assign: every float is written before it is read (the fetch fills send_, a contribution lands in
  // received_ before it counts, and only chunks with a mean are read from result_).
  send_.resize(model_floats);
  received_.resize(std::size_t{peers - 1} * block_.length);
  contributions_.assign(our_chunks, 0);
  contributed_.assign(std::size_t{our_chunks} * peers, 0);
  theirs_.reserve(peers - 1);
  result_.resize(model_floats);
  counts_.assign(partition_.chunk_count(), 0);
  delta_.assign(partition_.chunk_count(), 0);
  mean_order_.clear();
  mean_order_.reserve(partition_.chunk_count());  // a round then appends without allocating
  wire_offsets_.clear();
  if (wire_ != WireFormat::fp32) {
    wire_offsets(partition_, wire_, first_chunk_, first_chunk_ + our_chunks, wire_offsets_);
    wire_means_.resize(wire_offsets_.back());
  }
}

Status Round::reshape(RoundKey key, std::size_t model_floats, std::uint32_t peers, std::uint32_t self,
                      const RoundConfig& config) {
  auto partition = round_partition(model_floats, peers, self, config);
  if (!partition) return partition.error();
  partition_ = std::move(partition).value();
  configure(self, config);
  reset(key);
  return {};
}

void Round::reset(const RoundKey& key) {
  key_ = key;
  std::fill(contributions_.begin(), contributions_.end(), 0);
  std::fill(contributed_.begin(), contributed_.end(), 0);
  std::fill(counts_.begin(), counts_.end(), 0);
  std::fill(delta_.begin(), delta_.end(), 0);
  mean_order_.clear();
  started_ = deadline_passed_ = complete_ = finished_ = false;
  outbox_.clear();
  counters_ = {};
}

std::span<float> Round::contribution(std::uint32_t c, std::uint32_t from) {
  const Range r = partition_.chunk(c);
  const std::size_t q = from < self_ ? from : from - 1;
  return std::span<float>(received_).subspan(q * block_.length + (r.offset - block_.offset), r.length);
}

void Round::collect_theirs(std::uint32_t c, std::optional<std::uint32_t> also) {
  theirs_.clear();
  const std::size_t k = c - first_chunk_;
  for (std::uint32_t j = 0; j < peers(); ++j) {
    if (j != self_ && (contributed_[k * peers() + j] || j == also)) theirs_.push_back(contribution(c, j).data());
  }
}

// Algorithm 1, lines 3-6: partition s into p blocks and send block j to peer j.
std::span<const Send> Round::scatter(std::span<const float> ours) {
  outbox_.clear();
  if (started_ || finished_) return {};
  started_ = true;
  const std::uint32_t p = peers();
  // Start at our right-hand neighbour, so that not every peer sends to peer 0 first.
  for (std::uint32_t step = 1; step < p; ++step) {
    const std::uint32_t to = (self_ + step) % p;
    for (std::uint32_t c = partition_.first_chunk(to); c < partition_.first_chunk(to + 1); ++c) {
      const Range r = partition_.chunk(c);
      outbox_.push_back(
          {SendKind::scatter, to, c, r.offset, 1, ours.subspan(r.offset, r.length), {}});
    }
  }
  // Our own block needs no message: it is our contribution, received now. It counts now and is read when its chunk
  // is reduced (from send_, or from the model by a caller that folds): never summed on its own, and never read
  // earlier than the mean needs it. So after scatter() every chunk's sum lacks ours, before it none has it.
  for (std::uint32_t k = 0; k < contributions_.size(); ++k) {
    ++contributions_[k];
    contributed_[std::size_t{k} * p + self_] = 1;
  }
  // Contributions that came before we started may already make a quorum.
  for (std::uint32_t k = 0; k < contributions_.size(); ++k) {
    if (counts_[first_chunk_ + k] == 0 && quorum_met(contributions_[k], reduce_quorum_, p)) reduce(first_chunk_ + k);
  }
  complete_if_quorum();
  return outbox_;
}

Verdict Round::judge(const RoundKey& key, std::uint32_t from, std::size_t offset, std::size_t length,
                     std::uint32_t& chunk) const {
  if (const Verdict v = key_verdict(key); v != Verdict::accepted) return v;
  // Never trust a peer: only a chunk of our block, from another peer, with the right length.
  const auto c = partition_.find_chunk(offset, length);
  if (from >= peers() || from == self_ || !c || partition_.block_of(*c) != self_) return Verdict::malformed;
  if (contributed_[std::size_t{*c - first_chunk_} * peers() + from]) return Verdict::duplicate;
  // The chunk is reduced already: its mean has been sent, so this contribution cannot count.
  if (finished_ || counts_[*c] > 0) return Verdict::late;
  chunk = *c;
  return Verdict::accepted;
}

// Algorithm 1, lines 7-9: receive a block from peer i and store it in r(i), until theta_r of the
// peers have sent.
Outcome Round::on_scatter(const ScatterChunk& in) {
  const PayloadTarget target = contribution_target(in.key, in.from, in.offset, in.data.size());
  if (target.verdict != Verdict::accepted) {
    outbox_.clear();
    return {target.verdict, {}};
  }
  std::copy(in.data.begin(), in.data.end(), target.into.begin());
  return contribution_arrived(target.chunk, in.from);
}

PayloadTarget Round::contribution_target(const RoundKey& key, std::uint32_t from, std::size_t offset,
                                         std::size_t length) {
  std::uint32_t c = 0;
  if (const Verdict v = counted(judge(key, from, offset, length, c)); v != Verdict::accepted) return {v, 0, {}};
  return {Verdict::accepted, c, contribution(c, from)};
}

Outcome Round::contribution_arrived(std::uint32_t c, std::uint32_t from) {
  outbox_.clear();
  const std::uint32_t k = c - first_chunk_;
  // The chunk may have been reduced (a deadline, a catch-up) while the payload was on its way.
  if (contributed_[std::size_t{k} * peers() + from]) return {counted(Verdict::duplicate), {}};
  if (finished_ || counts_[c] > 0) return {counted(Verdict::late), {}};
  contributed_[std::size_t{k} * peers() + from] = 1;
  ++contributions_[k];
  // Line 9: until received from theta_r of the peers. Before scatter() our own part is missing.
  if (started_ && quorum_met(contributions_[k], reduce_quorum_, peers())) {
    reduce(c);
    complete_if_quorum();
  }
  return {Verdict::accepted, outbox_};
}

bool Round::reduces_with(std::uint32_t c, std::uint32_t from) const {
  if (!started_ || c < first_chunk_ || c - first_chunk_ >= contributions_.size() || from >= peers() ||
      from == self_)
    return false;
  const std::uint32_t k = c - first_chunk_;
  if (finished_ || counts_[c] > 0 || contributed_[std::size_t{k} * peers() + from]) return false;
  return quorum_met(contributions_[k] + 1, reduce_quorum_, peers());
}

// The last contribution to a chunk, our own still to be read: the caller reduces the chunk over the model.
std::optional<FoldTarget> Round::fold_target(std::uint32_t c, std::uint32_t from) {
  if (wire_ != WireFormat::fp32 || !reduces_with(c, from) || contributions_[c - first_chunk_] + 1 != peers())
    return std::nullopt;
  collect_theirs(c, from);  // folded() counts it
  std::span<float> mean;
  if (!deltas_) mean = std::span<float>(result_).subspan(partition_.chunk(c).offset, partition_.chunk(c).length);
  return FoldTarget{c, from, theirs_, 1.0 / peers(), deltas_, mean};
}

Outcome Round::folded(const FoldTarget& target) {
  outbox_.clear();
  const std::uint32_t k = target.chunk - first_chunk_;
  contributed_[std::size_t{k} * peers() + target.from] = 1;
  ++contributions_[k];
  reduced(target.chunk);
  complete_if_quorum();
  return {Verdict::accepted, outbox_};
}

// Algorithm 1, line 10: reduce to the elementwise mean, and lines 11-13: send it to every peer.
// The mean is over the contributions actually received, not over p: a missing peer must not pull
// the average towards zero.
void Round::reduce(std::uint32_t c) {
  const Range r = partition_.chunk(c);
  collect_theirs(c);
  // Our contribution, in send_ (counted at scatter(), read now); none before scatter() (finish()).
  const float* own = started_ ? send_.data() + r.offset : nullptr;
  reduce_chunk(r.length, own, theirs_.data(), static_cast<std::uint32_t>(theirs_.size()), 0,
               1.0 / contributions_[c - first_chunk_], result_.data() + r.offset, deltas_, nullptr, 0.0f);
  reduced(c);
}

void Round::reduced(std::uint32_t c) {
  const Range r = partition_.chunk(c);
  const std::uint32_t k = c - first_chunk_;
  const std::uint32_t n = contributions_[k];
  counts_[c] = n;
  mean_order_.push_back(c);
  if (n < peers()) ++counters_.short_reductions;
  const std::span<float> mean = std::span<float>(result_).subspan(r.offset, r.length);
  std::span<const std::byte> wire;
  if (wire_ != WireFormat::fp32) {
    const std::span<std::byte> bytes(wire_means_.data() + wire_offsets_[k], wire_offsets_[k + 1] - wire_offsets_[k]);
    encode_wire(wire_, mean, mean_residual_.empty() ? std::span<float>() : mean_residual_.subspan(r.offset, r.length),
                bytes);
    // Our own bytes decode, unless the mean holds a NaN or an infinity, for which int8 has no scale: then the mean
    // stays as computed (diverged), and the peers refuse the bytes as they would any diverged values.
    (void)decode_wire(wire_, bytes, mean);
    wire = bytes;
  }
  const std::uint32_t p = peers();
  for (std::uint32_t step = 1; step < p; ++step) {
    const std::uint32_t to = (self_ + step) % p;
    if (deltas_ && contributed_[std::size_t{k} * p + to]) {
      outbox_.push_back({SendKind::delta, to, c, r.offset, n, contribution(c, to), {}});
    } else {
      outbox_.push_back({SendKind::reduced, to, c, r.offset, n, mean, wire});
    }
  }
}

// Algorithm 1, lines 14-15: receive the mean of block i from peer i and store it in g(i).
Outcome Round::on_reduced(const ReducedChunk& in) {
  const PayloadTarget target = reduced_target(in.key, in.from, in.offset, in.data.size(), in.count, in.delta);
  if (target.verdict != Verdict::accepted) {
    outbox_.clear();
    return {target.verdict, {}};
  }
  std::copy(in.data.begin(), in.data.end(), target.into.begin());
  return reduced_arrived(target.chunk, in.count, in.delta);
}

PayloadTarget Round::reduced_target(const RoundKey& key, std::uint32_t from, std::size_t offset, std::size_t length,
                                    std::uint32_t count, bool delta) {
  if (const Verdict v = check_key(key); v != Verdict::accepted) return {v, 0, {}};
  // Only peer j reduces block j, and a mean averages between 1 and p contributions.
  const auto c = partition_.find_chunk(offset, length);
  // A delta is the mean less our contribution, so it counts ours: none comes before we scatter, nor with α = 1.
  if (from >= peers() || from == self_ || !c || partition_.block_of(*c) != from || count == 0 || count > peers() ||
      (delta && (!started_ || !deltas_))) {
    ++counters_.malformed;
    return {Verdict::malformed, 0, {}};
  }
  if (counts_[*c] > 0) {
    ++counters_.duplicate;
    return {Verdict::duplicate, 0, {}};
  }
  // The update may already be applied; changing the result now would change nothing but confuse.
  if (complete_) {
    ++counters_.late;
    return {Verdict::late, 0, {}};
  }
  return {Verdict::accepted, *c, std::span<float>(result_).subspan(offset, length)};
}

Outcome Round::reduced_arrived(std::uint32_t chunk, std::uint32_t count, bool delta) {
  outbox_.clear();
  // The round may have completed (a deadline, a catch-up) while the payload was on its way.
  if (counts_[chunk] > 0) {
    ++counters_.duplicate;
    return {Verdict::duplicate, {}};
  }
  if (complete_) {
    ++counters_.late;
    return {Verdict::late, {}};
  }
  counts_[chunk] = count;
  delta_[chunk] = delta ? 1 : 0;
  mean_order_.push_back(chunk);
  complete_if_quorum();
  return {Verdict::accepted, outbox_};
}

// Algorithm 1, line 16: until received from theta_c of the peers. We count chunks, not peers:
// a peer's block arrives chunk by chunk and each chunk can be missing on its own. Nothing
// completes before scatter(), so our contribution always goes out first.
void Round::complete_if_quorum() {
  if (complete_ || !started_) return;
  if (quorum_met(received_chunks(), complete_quorum_, partition_.chunk_count())) {
    complete_ = true;
    counters_.missing_at_completion = partition_.chunk_count() - received_chunks();
  }
}

std::span<const Send> Round::deadline_passed() {
  outbox_.clear();
  if (deadline_passed_) return {};
  deadline_passed_ = true;
  if (!started_ || finished_) return {};
  for (std::uint32_t k = 0; k < contributions_.size(); ++k) {
    if (counts_[first_chunk_ + k] == 0 && quorum_met(contributions_[k], reduce_quorum_, peers()))
      reduce(first_chunk_ + k);
  }
  complete_if_quorum();
  return outbox_;
}

bool Round::missing_only(std::uint32_t k, std::span<const std::uint8_t> absent) const {
  const std::uint32_t p = peers();
  for (std::uint32_t q = 0; q < p; ++q)
    if (q != self_ && !contributed_[std::size_t{k} * p + q] && !absent[q]) return false;
  return true;
}

bool Round::waits_only_on(std::span<const std::uint8_t> absent) const {
  if (!started_ || complete_) return false;
  for (std::uint32_t c = 0; c < partition_.chunk_count(); ++c) {
    if (counts_[c] > 0) continue;
    const std::uint32_t owner = partition_.block_of(c);
    if (owner == self_ ? !missing_only(c - first_chunk_, absent) : !absent[owner]) return false;
  }
  return true;
}

void Round::missing_contributions(std::span<std::uint8_t> out) const {
  std::fill(out.begin(), out.end(), std::uint8_t{0});
  if (!started_ || complete_) return;
  const std::uint32_t p = peers();
  for (std::uint32_t k = 0; k < contributions_.size(); ++k) {
    if (counts_[first_chunk_ + k] > 0) continue;
    for (std::uint32_t q = 0; q < p; ++q)
      if (q != self_ && !contributed_[std::size_t{k} * p + q]) out[q] = 1;
  }
}

bool Round::block_waits_only_on(std::span<const std::uint8_t> absent) const {
  bool waiting = false;
  for (std::uint32_t k = 0; k < contributions_.size(); ++k) {
    const std::uint32_t c = first_chunk_ + k;
    if (counts_[c] > 0) continue;
    if (!reduces_without(c, absent)) return false;
    waiting = true;
  }
  return waiting;
}

bool Round::reduces_without(std::uint32_t c, std::span<const std::uint8_t> absent) const {
  if (!started_ || finished_ || c < first_chunk_ || c - first_chunk_ >= contributions_.size() || counts_[c] > 0)
    return false;
  const std::uint32_t k = c - first_chunk_;
  // The quorum as after the deadline: the absent peers' parts are what the deadline would stop waiting for.
  return contributions_[k] >= reduce_quorum_ && missing_only(k, absent);
}

std::span<const Send> Round::reduce_without(std::span<const std::uint8_t> absent) {
  outbox_.clear();
  for (std::uint32_t c = first_chunk_; c < first_chunk_ + contributions_.size(); ++c)
    if (reduces_without(c, absent)) reduce(c);
  return outbox_;
}

std::span<const Send> Round::finish() {
  outbox_.clear();
  if (finished_) return {};
  finished_ = true;
  for (std::uint32_t k = 0; k < contributions_.size(); ++k) {
    if (counts_[first_chunk_ + k] == 0 && contributions_[k] > 0) reduce(first_chunk_ + k);
  }
  if (!complete_) {
    complete_ = true;
    counters_.missing_at_completion = partition_.chunk_count() - received_chunks();
  }
  return outbox_;
}

// BIDMach's implementation compared counts with `==`: a count that stepped past the quorum was
// never seen to meet it. We compare with `>=`. The timeout mode (the paper's section 6.1.4) waits
// for everyone until the caller says the deadline has passed.
bool Round::quorum_met(std::uint32_t arrived, std::uint32_t needed, std::uint32_t all) const {
  if (mode_ == QuorumMode::fraction) return arrived >= needed;
  return arrived >= all || (deadline_passed_ && arrived >= needed);
}

Verdict Round::key_verdict(const RoundKey& key) const {
  switch (key_order(key, key_)) {
    case KeyOrder::same: return Verdict::accepted;
    case KeyOrder::older: return Verdict::stale;
    case KeyOrder::newer: return Verdict::newer;
    case KeyOrder::foreign: return Verdict::malformed;
  }
  return Verdict::malformed;
}

Verdict Round::check_key(const RoundKey& key) { return counted(key_verdict(key)); }

Verdict Round::counted(Verdict v) {
  switch (v) {
    case Verdict::accepted: break;
    case Verdict::duplicate: ++counters_.duplicate; break;
    case Verdict::late: ++counters_.late; break;
    case Verdict::stale: ++counters_.stale; break;
    case Verdict::newer: ++counters_.newer; break;
    case Verdict::malformed: ++counters_.malformed; break;
  }
  return v;
}

}  // namespace gridtrain::allreduce
