#include "dataplane/line_runner.hpp"

#include <algorithm>
#include <tuple>
#include <utility>

#include "base/check.hpp"

namespace gridtrain::dataplane {

namespace {

using Version = std::pair<std::uint64_t, std::uint64_t>;

Version version_of(const allreduce::RoundKey& key) { return {key.epoch, key.layout_version}; }

// Slot::fetched, per chunk: its snapshot is in the round's send buffer; or it was folded (reduced over the model and
// updated in one pass, nothing in the send buffer, the update applied).
constexpr std::uint8_t kFetched = 1;
constexpr std::uint8_t kFolded = 2;

Landing landing_of(Landing::Kind kind) {
  Landing landing;
  landing.kind = kind;
  return landing;
}

}  // namespace

LineRunner::LineRunner(std::uint32_t dim, std::uint64_t node_id, ModelAccess& model, Outbox& outbox,
                       std::function<void(const RoundEvent&)> on_event, DimensionCounters& counters)
    : dim_(dim), node_id_(node_id), model_(model), outbox_(outbox), on_event_(std::move(on_event)),
      counters_(counters) {}

std::optional<Version> LineRunner::version() const {
  if (!line_) return std::nullopt;
  return Version{line_->epoch, line_->layout_version};
}

bool LineRunner::start_line(LineSpec spec) {
  if (spec.dim != dim_ || spec.self_index >= spec.peers.size() || spec.rounds_in_flight == 0) return false;
  const Version incoming{spec.epoch, spec.layout_version};
  if (line_ && incoming <= Version{line_->epoch, line_->layout_version}) return false;
  abandon_all();
  floor_ = std::max(floor_, incoming);
  line_ = std::move(spec);
  last_landing_.reset();
  // Who went silent is learned anew for each line: its peers, and their indices, may have changed.
  patience_ = allreduce::PeerPatience(static_cast<std::uint32_t>(line_->peers.size()));
  if (line_->round.wire != allreduce::WireFormat::fp32 && residual_.size() != model_.floats) {
    residual_.assign(model_.floats, 0.0f);
    mean_residual_.assign(model_.floats, 0.0f);
  }
  // The Rounds stay, to be reshaped for this line at their slot's first round (their buffers reused); a slot
  // with none allocates its Round then.
  for (Slot& slot : slots_) slot.reshape = true;
  ++generation_;
  slots_.resize(line_->rounds_in_flight);
  counters_.line_peers.store(static_cast<std::uint32_t>(line_->peers.size()), std::memory_order_relaxed);
  return true;
}

void LineRunner::drop_line(std::optional<Version> older_than) {
  if (!line_) return;
  if (older_than && Version{line_->epoch, line_->layout_version} >= *older_than) return;
  abandon_all();
  line_.reset();
  counters_.line_peers.store(0, std::memory_order_relaxed);
  for (Slot& slot : slots_) slot.reshape = true;  // kept for the next line (a node that lost its cluster rejoins)
  ++generation_;
}

void LineRunner::abandon_all() {
  for (std::uint32_t i = 0; i < slots_.size(); ++i) {
    Slot& slot = slots_[i];
    if (slot.active && !slot.done) ++counters_.abandoned;
    if (slot.active) outbox_.retire({dim_, i});
    slot.active = false;
  }
}

bool LineRunner::same_version(const allreduce::RoundKey& key) const {
  return line_ && key.dim == dim_ && key.line == line_->line && version_of(key) == Version{line_->epoch,
                                                                                          line_->layout_version};
}

void LineRunner::start_round(const allreduce::RoundKey& key) {
  if (!same_version(key)) {
    ++counters_.stale_dropped;
    return;
  }
  enter(key, false);
}

void LineRunner::deadline(const allreduce::RoundKey& key) {
  if (!same_version(key)) return;
  const auto i = static_cast<std::uint32_t>(key.round % slots_.size());
  Slot& slot = slots_[i];
  if (!slot.active || slot.round->key().round != key.round) return;
  if (slot.probe_end && !slot.round->complete()) {
    const auto now = std::chrono::steady_clock::now();
    if (now < *slot.probe_end) {
      ask_deadline_in(key, *slot.probe_end - now);
      return;
    }
    cut_late(i);
    if (slot.done) return;
  }
  if (last_landing_ && !slot.round->complete()) {
    const auto idle = std::chrono::steady_clock::now() - *last_landing_;
    const std::chrono::milliseconds timeout(line_->round.quorum_timeout_ms);
    if (idle < timeout) {
      ask_deadline_in(key, timeout - idle);
      return;
    }
  }
  force_complete(i);
}

void LineRunner::ask_deadline_in(const allreduce::RoundKey& key, std::chrono::steady_clock::duration after) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(after).count();
  on_event_(RoundEvent{RoundEvent::Kind::waiting, key, line_->self_index, 0,
                       static_cast<std::uint32_t>(std::max<std::int64_t>(1, ms))});
}

void LineRunner::time_missing_as_unheard(std::uint32_t i) {
  Slot& slot = slots_[i];
  waiting_.resize(slot.done_us.size());
  slot.round->missing_contributions(waiting_);
  for (std::size_t q = 0; q < waiting_.size(); ++q)
    if (waiting_[q] && slot.done_us[q] != allreduce::PeerPatience::kNotTimed)
      slot.done_us[q] = allreduce::PeerPatience::kUnheard;
}

void LineRunner::force_complete(std::uint32_t i) {
  time_missing_as_unheard(i);
  Slot& slot = slots_[i];
  fetch_own_block(i);
  send_all(i, slot.round->deadline_passed());
  complete_if_done(i);
}

bool LineRunner::enter(const allreduce::RoundKey& key, bool from_peer) {
  const auto i = static_cast<std::uint32_t>(key.round % slots_.size());
  Slot& slot = slots_[i];
  if (slot.active) {
    const std::uint64_t current = slot.round->key().round;
    if (current == key.round) return true;
    if (current > key.round) return false;
    // Catch-up: the older round of this slot finishes with what it has. Its last means are not sent: the slot's
    // buffers are about to hold the newer round, and the peers that still wanted them have moved on too.
    if (!slot.done) ++counters_.caught_up;
    time_missing_as_unheard(i);
    fetch_own_block(i);
    slot.round->finish();
    complete_if_done(i);
    outbox_.retire({dim_, i});
    slot.active = false;
  }
  const bool reshaped = !slot.round || slot.reshape;
  if (slot.round && !slot.reshape) {
    slot.round->reset(key);
  } else if (slot.round) {
    if (!slot.round->reshape(key, model_.floats, static_cast<std::uint32_t>(line_->peers.size()), line_->self_index,
                             line_->round)
             .ok())
      return false;  // start_line's spec was checked by the actors; a last line of defence
    slot.reshape = false;
  } else {
    auto created = allreduce::Round::create(key, model_.floats, static_cast<std::uint32_t>(line_->peers.size()),
                                            line_->self_index, line_->round);
    if (!created) return false;  // start_line's spec was checked by the actors; a last line of defence
    slot.round.emplace(std::move(created).value());
  }
  if (line_->round.wire != allreduce::WireFormat::fp32) slot.round->feed_back_means(mean_residual_);
  slot.active = true;
  slot.done = false;
  slot.applied = 0;
  allreduce::Round& round = *slot.round;
  const allreduce::Partition& part = round.partition();
  const std::uint32_t p = round.peers();
  slot.fetched.assign(part.chunk_count(), 0);
  if (line_->round.outer == allreduce::OuterMode::nesterov) slot.anchor.resize(model_.floats);
  if (reshaped && line_->round.wire != allreduce::WireFormat::fp32) {
    // Once per line version, as the Round's own buffers. Grown only where the partition asks more: retire() above
    // copied aside any frame half written.
    allreduce::wire_offsets(part, line_->round.wire, 0, part.chunk_count(), slot.wire_at);
    if (slot.wire_out.size() < slot.wire_at.back()) slot.wire_out.resize(slot.wire_at.back());
  }
  slot.held.clear();
  slot.next.assign(p, 0);
  slot.end.assign(p, 0);
  slot.heard.assign(p, 0);
  slot.heard[line_->self_index] = 1;
  slot.started = std::chrono::steady_clock::now();
  slot.done_us.assign(p, allreduce::PeerPatience::kUnheard);
  slot.done_us[line_->self_index] = allreduce::PeerPatience::kNotTimed;
  slot.probe_end.reset();
  // scatter() reduces a chunk of our block at once only where our values alone are a quorum: no contribution can
  // have come before it (a peer's frame enters the round, and so scatters it, before it lands).
  if (round.reduce_quorum() <= 1) fetch_own_block(i);
  // scatter() lists the chunks block by block, each block's in order: each peer's run of held is one range.
  for (const allreduce::Send& s : round.scatter()) {
    if (s.kind != allreduce::SendKind::scatter) {
      send_all(i, std::span<const allreduce::Send>(&s, 1));
      continue;
    }
    if (slot.end[s.to] == 0) slot.next[s.to] = slot.held.size();
    slot.held.push_back(s);
    slot.end[s.to] = slot.held.size();
  }
  const std::size_t window = p > 1 ? std::max<std::size_t>(1, (kScatterWindow + p - 2) / (p - 1)) : 0;
  for (std::uint32_t j = 1; j < p; ++j) release(i, (line_->self_index + j) % p, window);
  if (from_peer) on_event_(RoundEvent{RoundEvent::Kind::started, key, line_->self_index, 0});
  complete_if_done(i);
  skip_absent(i);
  return true;
}

void LineRunner::fetch(std::uint32_t i, std::uint32_t chunk) {
  Slot& slot = slots_[i];
  if (chunk >= slot.fetched.size() || slot.fetched[chunk]) return;
  slot.fetched[chunk] = kFetched;
  const allreduce::Range r = slot.round->partition().chunk(chunk);
  const std::span<float> into = slot.round->send_buffer().subspan(r.offset, r.length);
  if (line_->round.outer == allreduce::OuterMode::nesterov) {
    if (!model_.fetch_outer)
      precondition_violated("a line of allreduce.outer nesterov on an endpoint without the outer step");
    model_.fetch_outer(r.offset, into, std::span<float>(slot.anchor).subspan(r.offset, r.length));
  } else {
    model_.fetch(r.offset, into);
  }
}

void LineRunner::fetch_own_block(std::uint32_t i) {
  const allreduce::Partition& part = slots_[i].round->partition();
  const std::uint32_t self = slots_[i].round->self();
  for (std::uint32_t c = part.first_chunk(self); c < part.first_chunk(self + 1); ++c) fetch(i, c);
}

void LineRunner::release(std::uint32_t i, std::uint32_t to, std::size_t n) {
  Slot& slot = slots_[i];
  if (to >= slot.next.size()) return;
  while (n > 0 && slot.next[to] < slot.end[to]) {
    const allreduce::Send& s = slot.held[slot.next[to]++];
    if (slot.round->count(s.chunk) > 0) continue;  // its owner reduced it without us: nothing left to add
    if (slot.round->deltas() && !model_.memory.empty() && outbox_.kernel_reads_payload(line_->peers[to])) {
      // Straight from the model: the owner's answer is against what arrives (a delta), so no copy is kept.
      allreduce::Send direct = s;
      direct.data = model_.memory.subspan(s.offset, s.data.size());
      send_all(i, std::span<const allreduce::Send>(&direct, 1));
    } else if (line_->round.wire != allreduce::WireFormat::fp32) {
      // Compressed, with what earlier encodings of these floats dropped added in (error feedback).
      fetch(i, s.chunk);
      const std::size_t at = slot.wire_at[s.chunk];
      const std::span<std::byte> out(slot.wire_out.data() + at, slot.wire_at[s.chunk + 1] - at);
      allreduce::encode_wire(line_->round.wire, s.data, std::span<float>(residual_).subspan(s.offset, s.data.size()),
                             out);
      allreduce::Send encoded = s;
      encoded.wire = out;
      send_all(i, std::span<const allreduce::Send>(&encoded, 1));
    } else {
      fetch(i, s.chunk);
      send_all(i, std::span<const allreduce::Send>(&s, 1));
    }
    --n;
  }
}

void LineRunner::send_all(std::uint32_t slot, std::span<const allreduce::Send> sends) {
  const allreduce::RoundKey& key = slots_[slot].round->key();
  for (const allreduce::Send& s : sends) {
    FrameHeader h;
    switch (s.kind) {
      case allreduce::SendKind::scatter: h.kind = FrameKind::scatter; break;
      case allreduce::SendKind::reduced: h.kind = FrameKind::reduced; break;
      case allreduce::SendKind::delta: h.kind = FrameKind::delta; break;
    }
    h.key = key;
    h.from = line_->self_index;
    h.offset = s.offset;
    h.length = static_cast<std::uint32_t>(s.data.size());
    h.count = s.count;
    h.wire = s.wire.empty() ? allreduce::WireFormat::fp32 : line_->round.wire;
    outbox_.send(line_->peers[s.to], h, s.wire.empty() ? std::as_bytes(s.data) : s.wire, SlotTag{dim_, slot},
                 s.chunk);
  }
}

void LineRunner::complete_if_done(std::uint32_t i) {
  Slot& slot = slots_[i];
  if (!slot.active) return;
  const allreduce::Round& round = *slot.round;
  const auto means = round.means_in_order();
  const auto alpha = static_cast<float>(line_->round.elastic_rate);
  const bool outer = line_->round.outer == allreduce::OuterMode::nesterov;
  for (; slot.applied < means.size(); ++slot.applied) {
    const std::uint32_t c = means[slot.applied];
    if (slot.fetched[c] == kFolded) continue;  // its update came with its reduce
    const allreduce::Range r = round.partition().chunk(c);
    // A mean (not a delta) is applied against our copy of the chunk: one not yet copied (a quorum reached without
    // us, our values sent straight from the model) is copied now, and the update moves the model from where it is.
    if (!round.delta(c)) fetch(i, c);
    if (outer) {
      if (!model_.outer)
        precondition_violated("a line of allreduce.outer nesterov on an endpoint without the outer step");
      model_.outer(round, r.offset, r.offset + r.length, slot.anchor, line_->round.outer_rates());
    } else {
      model_.update(round, r.offset, r.offset + r.length, alpha);
    }
  }
  if (slot.done || !round.complete()) return;
  slot.done = true;
  patience_.round_done(slot.heard);
  // A block of no chunks gets no contributions: nobody to time.
  if (round.partition().first_chunk(round.self()) < round.partition().first_chunk(round.self() + 1))
    patience_.round_timed(slot.done_us, std::chrono::duration_cast<std::chrono::microseconds>(
                                            std::chrono::steady_clock::now() - slot.started)
                                            .count());
  ++counters_.rounds_done;
  const auto& c = round.counters();
  if (c.short_reductions > 0 || c.missing_at_completion > 0) ++counters_.quorum_shortfalls;
  on_event_(RoundEvent{RoundEvent::Kind::done, round.key(), line_->self_index,
                       static_cast<std::uint32_t>(c.missing_at_completion)});
}

Landing LineRunner::land(std::uint64_t sender, const FrameHeader& h) {
  const Landing drain = landing_of(Landing::Kind::drain);
  const Version incoming = version_of(h.key);
  if (!line_) {
    if (incoming <= floor_) {
      ++counters_.stale_dropped;
      return drain;
    }
    return landing_of(Landing::Kind::wait);
  }
  if (h.length > line_->round.max_chunk_floats) return landing_of(Landing::Kind::refuse);
  const Version ours{line_->epoch, line_->layout_version};
  if (incoming < ours) {
    ++counters_.stale_dropped;
    return drain;
  }
  if (incoming > ours) return landing_of(Landing::Kind::wait);
  if (h.key.dim != dim_ || h.key.line != line_->line || h.from >= line_->peers.size() ||
      line_->peers[h.from] != sender || h.from == line_->self_index || h.wire != line_->round.wire) {
    ++counters_.malformed;
    return drain;
  }
  // The line's links are carrying its rounds: whatever this frame's verdict (a round completed short still gets
  // its late frames), a deadline of the line waits on (see deadline()).
  last_landing_ = std::chrono::steady_clock::now();
  // A frame of a silent peer, even a late one: it is back, and waited for fully from its next round on.
  patience_.heard(h.from);
  if (!enter(h.key, true)) {
    ++counters_.stale_dropped;
    return drain;
  }
  const auto i = static_cast<std::uint32_t>(h.key.round % slots_.size());
  allreduce::Round& round = *slots_[i].round;
  const allreduce::PayloadTarget target =
      h.kind == FrameKind::scatter
          ? round.contribution_target(h.key, h.from, h.offset, h.length)
          : round.reduced_target(h.key, h.from, h.offset, h.length, h.count, h.kind == FrameKind::delta);
  switch (target.verdict) {
    case allreduce::Verdict::accepted:
      return Landing{Landing::Kind::direct, target.into, i, h.key.round, target.chunk, generation_};
    case allreduce::Verdict::malformed: ++counters_.malformed; break;
    case allreduce::Verdict::stale: ++counters_.stale_dropped; break;
    default: break;  // duplicate or late: normal under a quorum, counted by the Round
  }
  return drain;
}

void LineRunner::landed(const FrameHeader& h, const Landing& landing, std::span<const std::byte> staged) {
  if (landing.kind != Landing::Kind::direct) return;
  // The slot may have moved on while the payload came (a newer round, a new line): then it is stale. What it wrote
  // into the slot's newer round has no count there, so it changes nothing (a contribution's place is written by
  // that peer's frames alone, which come in order on its connection).
  if (!line_ || landing.generation != generation_ || landing.slot >= slots_.size() || !slots_[landing.slot].active ||
      slots_[landing.slot].round->key().round != landing.round || !same_version(h.key)) {
    ++counters_.stale_dropped;
    return;
  }
  if (h.wire != allreduce::WireFormat::fp32 && !allreduce::decode_wire(h.wire, staged, landing.into).ok()) {
    // What it wrote has no count, so it changes nothing: the round goes on without this frame.
    ++counters_.malformed;
    return;
  }
  Slot& slot = slots_[landing.slot];
  allreduce::Round& round = *slot.round;
  allreduce::Outcome outcome;
  if (h.kind != FrameKind::scatter) {
    outcome = round.reduced_arrived(landing.chunk, h.count, h.kind == FrameKind::delta);
  } else {
    // Our own values for the chunk, read just as the Round reduces the chunk with this contribution: folded where
    // it is the last one the chunk waits for, else copied out first; not read at all while the chunk waits.
    const std::uint32_t c = landing.chunk;
    std::optional<allreduce::FoldTarget> fold;
    if (!slot.fetched[c] && round.reduces_with(c, h.from)) {
      if (model_.fold && line_->round.outer == allreduce::OuterMode::elastic) fold = round.fold_target(c, h.from);
      if (!fold) fetch(landing.slot, c);
    }
    if (fold) {
      model_.fold(h.offset, h.length, *fold, static_cast<float>(line_->round.elastic_rate));
      slot.fetched[c] = kFolded;
      outcome = round.folded(*fold);
    } else {
      outcome = round.contribution_arrived(c, h.from);
    }
  }
  switch (outcome.verdict) {
    case allreduce::Verdict::accepted:
      counters_.bytes_received += h.payload_bytes();
      slot.heard[h.from] = 1;  // (patience_ heard it as it landed)
      // A peer is timed by its contributions to our block: they wait on nobody else, its means on everyone.
      if (h.kind == FrameKind::scatter)
        slot.done_us[h.from] =
            std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - slot.started)
                .count();
      send_all(landing.slot, outcome.sends);
      // A mean came back from the block's owner: one more of our chunks may go to it.
      if (h.kind != FrameKind::scatter) release(landing.slot, h.from, 1);
      complete_if_done(landing.slot);
      skip_absent(landing.slot);
      break;
    case allreduce::Verdict::malformed: ++counters_.malformed; break;
    case allreduce::Verdict::stale: ++counters_.stale_dropped; break;
    default: break;
  }
}

void LineRunner::skip_absent(std::uint32_t i) {
  Slot& slot = slots_[i];
  if (!line_ || line_->round.quorum != allreduce::QuorumMode::timeout || !patience_.any_late() || !slot.active ||
      slot.done)
    return;
  allreduce::Round& round = *slot.round;
  if (patience_.any_silent()) {
    const auto silent = patience_.silent_peers();
    // Our block's chunks that wait only for silent peers: reduced now, so that our means go to the peers that wait
    // for them (each of them does the same with its block).
    reduce_block_without(i, silent);
    if (slot.done) return;
    // Nothing left but silent peers' parts: the round completes on its quorum now, not at its deadline.
    if (round.waits_only_on(silent)) {
      ++counters_.silent_skipped;
      force_complete(i);
      return;
    }
  }
  // Late peers (silent ones included) get a probe: once our block waits only on their contributions, or the
  // round only on their parts, a share of the round's time so far. After it, our block is reduced without them,
  // and the round completes as soon as it waits only on them. The other owners do the same with their blocks, each
  // by its own clock; a mean that waits, at its owner, on a late peer comes after that owner's probe.
  const auto late = patience_.late_peers();
  const auto now = std::chrono::steady_clock::now();
  if (!slot.probe_end) {
    if (!round.block_waits_only_on(late) && !round.waits_only_on(late)) return;
    const std::int64_t probe = allreduce::PeerPatience::probe_us(
        std::chrono::duration_cast<std::chrono::microseconds>(now - slot.started).count());
    slot.probe_end = now + std::chrono::microseconds(probe);
    ++counters_.late_probes;
    ask_deadline_in(round.key(), std::chrono::microseconds(probe));
    return;
  }
  if (now < *slot.probe_end) return;  // deadline() comes at its end
  cut_late(i);
}

void LineRunner::reduce_block_without(std::uint32_t i, std::span<const std::uint8_t> absent) {
  allreduce::Round& round = *slots_[i].round;
  // Our values are copied out just before, as for any reduce.
  const allreduce::Partition& part = round.partition();
  for (std::uint32_t c = part.first_chunk(round.self()); c < part.first_chunk(round.self() + 1); ++c)
    if (round.reduces_without(c, absent)) fetch(i, c);
  send_all(i, round.reduce_without(absent));
  complete_if_done(i);
}

void LineRunner::cut_late(std::uint32_t i) {
  Slot& slot = slots_[i];
  const auto late = patience_.late_peers();
  reduce_block_without(i, late);
  if (slot.done || !slot.round->waits_only_on(late)) return;
  ++counters_.late_cut;
  force_complete(i);
}

}  // namespace gridtrain::dataplane
