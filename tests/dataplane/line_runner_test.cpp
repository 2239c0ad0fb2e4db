// LineRunner: the rounds of a line as the data plane runs them, over a wire the test drives frame by frame.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "allreduce/elastic_update.hpp"
#include "allreduce/wire_codec.hpp"
#include "dataplane/line_runner.hpp"

using namespace gridtrain;
using namespace gridtrain::dataplane;

namespace {

struct Frame {
  std::uint64_t from = 0;
  std::uint64_t to = 0;
  FrameHeader header;
  std::vector<std::byte> payload;  // in the header's wire format
  SlotTag tag;
  const std::byte* source = nullptr;  // where the runner's payload lay: the model, or its Round's buffers
  // An fp32 payload's floats.
  std::vector<float> floats() const {
    std::vector<float> out(payload.size() / sizeof(float));
    std::memcpy(out.data(), payload.data(), out.size() * sizeof(float));
    return out;
  }
};

// The frames in flight between the nodes of the test, first in, first out.
struct Wire {
  std::deque<Frame> frames;
  std::size_t retired = 0;
};

// One node: its model, its runner, and an Outbox onto the wire.
struct TestNode : Outbox {
  TestNode(std::uint64_t id, Wire& wire, std::vector<float> values) : id(id), wire(wire), model(std::move(values)) {
    access.floats = model.size();
    access.fetch = [this](std::size_t offset, std::span<float> into) {
      std::copy_n(model.begin() + static_cast<std::ptrdiff_t>(offset), into.size(), into.begin());
    };
    access.update = [this](const allreduce::Round& round, std::size_t begin, std::size_t end, float alpha) {
      allreduce::elastic_update(std::span<float>(model).subspan(begin, end - begin), begin, round, alpha);
    };
    // As the node's store does it (actors/dimension_node.cpp); a test may take it away.
    access.fold = [this](std::size_t offset, std::size_t length, const allreduce::FoldTarget& target, float alpha) {
      folded.push_back(offset);
      allreduce::fold_chunk(std::span<float>(model).subspan(offset, length), target, 0, alpha);
    };
    access.memory = model;
    runner = std::make_unique<LineRunner>(0, id, access, *this, [this](const RoundEvent& e) { events.push_back(e); },
                                          counters);
  }
  void send(std::uint64_t node, const FrameHeader& header, std::span<const std::byte> payload, SlotTag tag,
            std::uint32_t) override {
    REQUIRE(payload.size() == header.payload_bytes());
    wire.frames.push_back({id, node, header, {payload.begin(), payload.end()}, tag, payload.data()});
  }
  // The wire copies a payload as it is sent, as the kernel does: a frame may come straight from the model, unless
  // a test says otherwise.
  bool kernel_reads_payload(std::uint64_t) const override { return direct; }
  void retire(SlotTag tag) override {
    const auto before = wire.frames.size();
    std::erase_if(wire.frames, [&](const Frame& f) { return f.from == id && f.tag == tag; });
    wire.retired += before - wire.frames.size();
  }
  std::size_t done() const {
    return static_cast<std::size_t>(
        std::count_if(events.begin(), events.end(), [](const RoundEvent& e) { return e.kind == RoundEvent::Kind::done; }));
  }

  std::uint64_t id;
  Wire& wire;
  std::vector<float> model;
  std::vector<std::size_t> folded;  // the offsets of the chunks folded, in order
  bool direct = true;
  ModelAccess access;
  DimensionCounters counters;
  std::vector<RoundEvent> events;
  std::unique_ptr<LineRunner> runner;
};

allreduce::RoundConfig exact(std::uint32_t chunk) {
  allreduce::RoundConfig c;
  c.quorum = allreduce::QuorumMode::fraction;
  c.reduce_threshold = c.complete_threshold = c.advance_threshold = 1;
  c.elastic_rate = 1;
  c.max_chunk_floats = chunk;
  return c;
}

// p nodes with ids 10, 20, ...; node i's model holds 100·i + index.
struct Line {
  Line(std::uint32_t p, std::size_t floats, allreduce::RoundConfig config, std::uint32_t in_flight = 2) {
    for (std::uint32_t i = 0; i < p; ++i) {
      std::vector<float> values(floats);
      for (std::size_t j = 0; j < floats; ++j) values[j] = static_cast<float>(100 * i + j);
      nodes.push_back(std::make_unique<TestNode>(10 * (i + 1), wire, std::move(values)));
    }
    spec.epoch = 1;
    spec.layout_version = 5;
    spec.dim = 0;
    spec.line = 3;
    for (auto& n : nodes) spec.peers.push_back(n->id);
    spec.round = config;
    spec.rounds_in_flight = in_flight;
    for (std::uint32_t i = 0; i < p; ++i) start_line(i, spec);
  }
  void start_line(std::uint32_t i, LineSpec s) {
    s.self_index = i;
    CHECK(nodes[i]->runner->start_line(std::move(s)));
  }
  allreduce::RoundKey key(std::uint64_t round) const {
    return {.epoch = spec.epoch, .layout_version = spec.layout_version, .dim = 0, .line = spec.line, .round = round};
  }
  TestNode& by_id(std::uint64_t id) {
    return **std::find_if(nodes.begin(), nodes.end(), [&](const auto& n) { return n->id == id; });
  }
  // Lands one frame as a link would: the header first, then the payload where the runner said.
  Landing::Kind deliver(const Frame& f) {
    TestNode& to = by_id(f.to);
    const Landing landing = to.runner->land(f.from, f.header);
    if (landing.kind == Landing::Kind::direct) {
      REQUIRE(landing.into.size() == f.header.length);
      if (f.header.wire == allreduce::WireFormat::fp32) {
        REQUIRE(landing.into.size_bytes() == f.payload.size());
        std::memcpy(landing.into.data(), f.payload.data(), f.payload.size());
        to.runner->landed(f.header, landing);
      } else {
        to.runner->landed(f.header, landing, f.payload);  // staged whole, as a link does
      }
    }
    if (landing.kind == Landing::Kind::wait) waiting.push_back(f);
    return landing.kind;
  }
  void deliver_all() {
    while (!wire.frames.empty()) {
      Frame f = std::move(wire.frames.front());
      wire.frames.pop_front();
      deliver(f);
    }
  }
  void round(std::uint64_t r) {
    for (auto& n : nodes) n->runner->start_round(key(r));
    deliver_all();
  }

  Wire wire;
  std::vector<std::unique_ptr<TestNode>> nodes;
  LineSpec spec;
  std::vector<Frame> waiting;
};

}  // namespace

TEST_CASE("a line of three runs a round to the exact mean, and each node tells that it is done") {
  Line line(3, 10, exact(2));
  line.round(1);
  for (auto& n : line.nodes) {
    CAPTURE(n->id);
    for (std::size_t j = 0; j < 10; ++j) CHECK(n->model[j] == static_cast<float>(100 + j));
    REQUIRE(n->done() == 1);
    CHECK(n->events[0].key == line.key(1));
    CHECK(n->events[0].chunks_missing == 0);
    CHECK(n->counters.rounds_done == 1);
  }
  // Every float goes to its block's owner from the 2 others, and its mean back to those 2: 40 floats received.
  std::uint64_t received = 0;
  for (auto& n : line.nodes) received += n->counters.bytes_received;
  CHECK(received == 40 * sizeof(float));
}

TEST_CASE("round after round runs in the same buffers: round 5's frames come from where round 1's came from") {
  Line line(3, 12, exact(4), 2);  // α = 1: the mean to every peer, so every value is copied as it goes
  std::vector<std::set<const std::byte*>> sources(7);  // per round: where its frames' payloads lay
  for (std::uint64_t r = 1; r <= 6; ++r) {
    for (auto& n : line.nodes) n->runner->start_round(line.key(r));
    for (const Frame& f : line.wire.frames) sources[r].insert(f.source);
    line.deliver_all();
    for (auto& n : line.nodes) CHECK(n->done() == r);
  }
  // Two slots, one Round each, allocated once: rounds 1, 3 and 5 sent from the same memory, 2, 4 and 6 likewise.
  CHECK_FALSE(sources[1].empty());
  CHECK(sources[1] == sources[3]);
  CHECK(sources[3] == sources[5]);
  CHECK(sources[2] == sources[4]);
  CHECK(sources[4] == sources[6]);
  CHECK(sources[1] != sources[2]);
}

TEST_CASE("where only the kernel reads a frame, a node's values go out straight from its model, round after round") {
  allreduce::RoundConfig c = exact(4);
  c.elastic_rate = 0.5;  // deltas (α = 1 sends the mean, which needs a copy)
  Line line(3, 12, c, 2);
  for (std::uint64_t r = 1; r <= 3; ++r) {
    for (auto& n : line.nodes) n->runner->start_round(line.key(r));
    REQUIRE_FALSE(line.wire.frames.empty());
    for (const Frame& f : line.wire.frames) {
      REQUIRE(f.header.kind == FrameKind::scatter);
      CHECK(f.source == std::as_bytes(std::span(line.by_id(f.from).model)).data() + f.header.offset * 4);  // no copy
    }
    line.deliver_all();
    for (auto& n : line.nodes) CHECK(n->done() == r);
  }
  // Each round halves every node's distance to the mean, 100 + j: node 10 from 100 below it to 12.5 below.
  for (std::size_t j = 0; j < 12; ++j) {
    CHECK(line.nodes[0]->model[j] == static_cast<float>(87.5 + j));
    CHECK(line.nodes[1]->model[j] == static_cast<float>(100 + j));
    CHECK(line.nodes[2]->model[j] == static_cast<float>(112.5 + j));
  }
}

TEST_CASE("a newer round of a slot finishes the older one, whose frames not yet sent are dropped") {
  Line line(3, 6, exact(2), 1);
  for (auto& n : line.nodes) n->runner->start_round(line.key(1));
  // Node 30's frames never arrive; round 2 reaches everyone from node 10 first.
  std::erase_if(line.wire.frames, [](const Frame& f) { return f.from == 30; });
  line.deliver_all();
  CHECK(line.nodes[0]->done() == 0);
  line.nodes[0]->runner->start_round(line.key(2));
  line.deliver_all();
  // Nodes 20 and 30 caught up: round 1 finished with what it had, round 2 started when its first frame came.
  CHECK(line.nodes[1]->counters.caught_up == 1);
  CHECK(line.nodes[1]->done() >= 1);
  const auto started = std::count_if(line.nodes[1]->events.begin(), line.nodes[1]->events.end(),
                                     [](const RoundEvent& e) { return e.kind == RoundEvent::Kind::started; });
  CHECK(started == 1);
  for (auto& n : line.nodes) CHECK(n->done() == 2);
}

TEST_CASE("frames of an older version are drained and counted; a newer version's wait for its line") {
  Line line(2, 4, exact(2));
  for (auto& n : line.nodes) n->runner->start_round(line.key(1));
  Frame old = line.wire.frames.front();
  line.deliver_all();
  // A newer layout version: node 10 has it, node 20 not yet.
  LineSpec next = line.spec;
  next.layout_version = 6;
  line.start_line(0, next);
  allreduce::RoundKey newer = line.key(1);
  newer.layout_version = 6;
  line.nodes[0]->runner->start_round(newer);
  const Frame early = line.wire.frames.front();
  CHECK(line.deliver(early) == Landing::Kind::wait);
  CHECK(line.nodes[1]->counters.stale_dropped == 0);
  line.start_line(1, next);
  CHECK(line.deliver(early) != Landing::Kind::wait);
  // Now round 1 of version 5 is stale at node 20.
  CHECK(line.deliver(old) == Landing::Kind::drain);
  CHECK(line.nodes[1]->counters.stale_dropped == 1);
}

TEST_CASE("a frame that names another peer's index, or is longer than any chunk of the line, is not read") {
  Line line(3, 6, exact(2));
  for (auto& n : line.nodes) n->runner->start_round(line.key(1));
  Frame f = line.wire.frames.front();  // from node 10, index 0
  Frame forged = f;
  forged.from = 20;  // node 20 claims index 0
  forged.to = f.to == 20 ? 30 : f.to;
  CHECK(line.deliver(forged) == Landing::Kind::drain);
  CHECK(line.by_id(forged.to).counters.malformed == 1);
  Frame huge = f;
  huge.header.length = 1u << 31;
  CHECK(line.by_id(huge.to).runner->land(huge.from, huge.header).kind == Landing::Kind::refuse);
}

namespace {

// Timeout quorum mode with θr = θc = 0.5 and a 20 ms deadline (the actors keep the clock: the test calls it).
allreduce::RoundConfig timeout_half() {
  allreduce::RoundConfig c = exact(2);
  c.quorum = allreduce::QuorumMode::timeout;
  c.reduce_threshold = c.complete_threshold = 0.5;
  c.quorum_timeout_ms = 20;
  return c;
}

// The deadline as the actors drive it: told to the runner, and again as often as it asks (RoundEvent waiting),
// after the wait it asks for. Returns how many times it asked.
int pass_deadline(TestNode& node, const allreduce::RoundKey& key) {
  for (int asked = 0;; ++asked) {
    const std::size_t before = node.events.size();
    node.runner->deadline(key);
    if (node.events.size() == before || node.events.back().kind != RoundEvent::Kind::waiting) return asked;
    std::this_thread::sleep_for(std::chrono::milliseconds(node.events.back().wait_ms));
  }
}

// Nodes 10 and 20 run round 1 while node 30 is cut off (nothing reaches it, nothing comes from it), until the
// deadline passes and its frames are delivered too.
void run_round_without_30(Line& line) {
  auto deliver_but_30 = [&] {
    while (!line.wire.frames.empty()) {
      Frame f = std::move(line.wire.frames.front());
      line.wire.frames.pop_front();
      if (f.to != 30 && f.from != 30) line.deliver(f);
    }
  };
  for (std::uint32_t i = 0; i < 2; ++i) line.nodes[i]->runner->start_round(line.key(1));
  deliver_but_30();
  CHECK(line.nodes[0]->done() == 0);
  for (std::uint32_t i = 0; i < 2; ++i) pass_deadline(*line.nodes[i], line.key(1));
  deliver_but_30();
}

}  // namespace

TEST_CASE("a round is not cut while its line's frames are landing: its deadline passes a timeout after the last") {
  allreduce::RoundConfig c = timeout_half();
  c.quorum_timeout_ms = 200;
  Line line(3, 6, c);
  // No frame of the round has landed: the deadline passes as the actors say, a timeout after the round's start.
  line.nodes[0]->runner->start_round(line.key(1));
  line.wire.frames.clear();
  CHECK(pass_deadline(*line.nodes[0], line.key(1)) == 0);
  // Round 2: node 20's frames land at node 10 just before the deadline comes; node 30 is silent.
  for (std::uint32_t i = 0; i < 2; ++i) line.nodes[i]->runner->start_round(line.key(2));
  while (!line.wire.frames.empty()) {
    Frame f = std::move(line.wire.frames.front());
    line.wire.frames.pop_front();
    if (f.from == 20 && f.to == 10) line.deliver(f);
  }
  const std::size_t before = line.nodes[0]->events.size();
  line.nodes[0]->runner->deadline(line.key(2));
  REQUIRE(line.nodes[0]->events.size() == before + 1);
  const RoundEvent& asked = line.nodes[0]->events.back();
  CHECK(asked.kind == RoundEvent::Kind::waiting);
  CHECK(asked.key == line.key(2));
  CHECK(asked.wait_ms > 0);
  CHECK(asked.wait_ms <= 200);
  // Round 3 has no frame of its own yet (on a slow link they queue behind round 2's), but the line's last frame
  // landed just now: it waits too.
  line.nodes[0]->runner->start_round(line.key(3));
  line.nodes[0]->runner->deadline(line.key(3));
  CHECK(line.nodes[0]->events.back().kind == RoundEvent::Kind::waiting);
  CHECK(line.nodes[0]->events.back().key == line.key(3));
  auto means_from_10 = [&] {
    return std::count_if(line.wire.frames.begin(), line.wire.frames.end(),
                         [](const Frame& f) { return f.from == 10 && f.header.kind != FrameKind::scatter; });
  };
  CHECK(means_from_10() == 0);  // its block waits for node 30 until the deadline
  CHECK(pass_deadline(*line.nodes[0], line.key(2)) >= 1);
  CHECK(means_from_10() > 0);  // then reduced from node 20's and its own
}

TEST_CASE("in timeout mode a silent peer holds a round only until the actors say its deadline passed") {
  Line line(3, 6, timeout_half());
  run_round_without_30(line);
  for (std::uint32_t i = 0; i < 2; ++i) CHECK(line.nodes[i]->done() == 1);
  CHECK(line.nodes[0]->counters.quorum_shortfalls == 1);
}

TEST_CASE("a peer silent for two rounds is not waited for; the first of its frames that counts has it waited for") {
  Line line(3, 6, timeout_half());
  // Rounds 1 and 2 without node 30: each waits for its deadline.
  auto deliver_but_30 = [&] {
    while (!line.wire.frames.empty()) {
      Frame f = std::move(line.wire.frames.front());
      line.wire.frames.pop_front();
      if (f.to != 30 && f.from != 30) line.deliver(f);
    }
  };
  for (std::uint64_t r = 1; r <= 2; ++r) {
    for (std::uint32_t i = 0; i < 2; ++i) line.nodes[i]->runner->start_round(line.key(r));
    deliver_but_30();
    CHECK(line.nodes[0]->done() == r - 1);  // held until its deadline
    for (std::uint32_t i = 0; i < 2; ++i) pass_deadline(*line.nodes[i], line.key(r));
    deliver_but_30();
    CHECK(line.nodes[0]->done() == r);
  }
  // Round 3: node 30 is silent now; nodes 10 and 20 complete as soon as each other's parts are in, no deadline.
  for (std::uint32_t i = 0; i < 2; ++i) line.nodes[i]->runner->start_round(line.key(3));
  deliver_but_30();
  for (std::uint32_t i = 0; i < 2; ++i) CHECK(line.nodes[i]->done() == 3);
  CHECK(line.nodes[0]->counters.silent_skipped == 1);
  // Node 30 comes back in round 4 (its first round back may still complete without it, where its frames come
  // after the others'): its frames are heard, and from then on it is waited for like the others.
  for (std::uint32_t i = 0; i < 3; ++i) line.nodes[i]->runner->start_round(line.key(4));
  line.deliver_all();
  for (std::uint32_t i = 0; i < 3; ++i) CHECK(line.nodes[i]->done() >= 1);
  CHECK(line.nodes[0]->done() == 4);
  const std::uint64_t skipped = line.nodes[0]->counters.silent_skipped;
  // Round 5 without node 30 again: it was heard in round 4, so the round waits for its deadline once more.
  for (std::uint32_t i = 0; i < 2; ++i) line.nodes[i]->runner->start_round(line.key(5));
  deliver_but_30();
  CHECK(line.nodes[0]->done() == 4);
  CHECK(line.nodes[0]->counters.silent_skipped == skipped);
  for (std::uint32_t i = 0; i < 2; ++i) pass_deadline(*line.nodes[i], line.key(5));
  deliver_but_30();
  CHECK(line.nodes[0]->done() == 5);
}

TEST_CASE("a peer that holds its rounds up is late: waited for only a probe, then fully again once it keeps up") {
  Line line(3, 6, timeout_half());
  // Delivers every frame on the wire but those from node 30, which it holds back (node 30 itself hears everything).
  std::deque<Frame> from_30;
  auto deliver_holding_30 = [&] {
    while (!line.wire.frames.empty()) {
      Frame f = std::move(line.wire.frames.front());
      line.wire.frames.pop_front();
      if (f.from == 30)
        from_30.push_back(std::move(f));
      else
        line.deliver(f);
    }
  };
  // Node 30's frames of round r come `late` after the others'.
  auto round_with_30_late = [&](std::uint64_t r, std::chrono::milliseconds late) {
    for (std::uint32_t i = 0; i < 3; ++i) line.nodes[i]->runner->start_round(line.key(r));
    from_30.clear();
    deliver_holding_30();
    std::this_thread::sleep_for(late);
    for (auto& f : from_30) line.wire.frames.push_back(std::move(f));
    line.deliver_all();
  };
  // A line's first rounds are not counted; then one round that waits 40 ms for node 30 alone.
  std::uint64_t r = 1;
  for (; r <= 4; ++r) round_with_30_late(r, std::chrono::milliseconds(0));
  round_with_30_late(r++, std::chrono::milliseconds(40));
  CHECK(line.nodes[0]->done() == 5);
  CHECK(line.nodes[0]->counters.late_probes == 0);
  // Now node 30 is late: once the round waits only on it, the round asks for a probe far shorter than its 20 ms
  // deadline, and completes without node 30 when the probe is over, node 30's frames still on their way.
  for (std::uint32_t i = 0; i < 3; ++i) line.nodes[i]->runner->start_round(line.key(r));
  from_30.clear();
  const std::size_t events_before = line.nodes[0]->events.size();
  deliver_holding_30();
  REQUIRE(line.nodes[0]->events.size() == events_before + 1);
  CHECK(line.nodes[0]->events.back().kind == RoundEvent::Kind::waiting);
  CHECK(line.nodes[0]->events.back().wait_ms < 20);
  CHECK(line.nodes[0]->counters.late_probes == 1);
  CHECK(line.nodes[0]->done() == 5);
  // The probe's timer, as the actors would send it: each of nodes 10 and 20 reduces its block without node 30.
  std::this_thread::sleep_for(std::chrono::milliseconds(line.nodes[0]->events.back().wait_ms + 1));
  for (std::uint32_t i = 0; i < 2; ++i) line.nodes[i]->runner->deadline(line.key(r));
  deliver_holding_30();
  CHECK(line.nodes[0]->done() == 6);
  CHECK(line.nodes[1]->done() == 6);
  CHECK(line.nodes[0]->counters.late_cut.load() == 1);
  CHECK(line.nodes[0]->counters.silent_skipped.load() == 0);
  CHECK(line.nodes[0]->counters.quorum_shortfalls == 1);
  for (auto& f : from_30) line.wire.frames.push_back(std::move(f));
  line.deliver_all();  // late: drained, nothing changes
  ++r;
  // Node 30 keeps up, round after round of a few milliseconds: it is waited for fully again. A round that then
  // misses it waits for its deadline, with no probe.
  for (int i = 0; i < 30; ++i) {
    for (std::uint32_t n = 0; n < 3; ++n) line.nodes[n]->runner->start_round(line.key(r));
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    line.deliver_all();
    ++r;
  }
  const std::uint64_t probes = line.nodes[0]->counters.late_probes;
  const std::uint64_t done = line.nodes[0]->done();
  for (std::uint32_t i = 0; i < 3; ++i) line.nodes[i]->runner->start_round(line.key(r));
  while (!line.wire.frames.empty()) {
    Frame f = std::move(line.wire.frames.front());
    line.wire.frames.pop_front();
    if (f.from != 30) line.deliver(f);
  }
  CHECK(line.nodes[0]->counters.late_probes == probes);
  CHECK(line.nodes[0]->done() == done);
}

TEST_CASE("in fraction mode nothing is skipped: the quorum acts at once anyway, and a silent peer changes nothing") {
  allreduce::RoundConfig c = timeout_half();
  c.quorum = allreduce::QuorumMode::fraction;
  Line line(3, 6, c);
  for (std::uint64_t r = 1; r <= 3; ++r) {
    for (std::uint32_t i = 0; i < 2; ++i) line.nodes[i]->runner->start_round(line.key(r));
    while (!line.wire.frames.empty()) {
      Frame f = std::move(line.wire.frames.front());
      line.wire.frames.pop_front();
      if (f.to != 30 && f.from != 30) line.deliver(f);
    }
  }
  CHECK(line.nodes[0]->done() == 3);
  CHECK(line.nodes[0]->counters.silent_skipped == 0);
}

TEST_CASE("a new line drops the old line's rounds without an update, and its queued frames") {
  Line line(2, 4, exact(2));
  line.nodes[0]->runner->start_round(line.key(1));
  const std::vector<float> fetched = line.nodes[0]->model;
  CHECK_FALSE(line.wire.frames.empty());
  LineSpec next = line.spec;
  next.layout_version = 6;
  line.start_line(0, next);
  CHECK(line.wire.frames.empty());
  CHECK(line.wire.retired > 0);
  CHECK(line.nodes[0]->counters.abandoned == 1);
  CHECK(line.nodes[0]->model == fetched);
  CHECK_FALSE(line.nodes[0]->runner->start_line(line.spec));  // older: ignored
}

TEST_CASE("a round keeps a window of chunks out to each peer, and each mean it gets back lets one more go") {
  // 2 blocks of 20 floats, 10 chunks each: more than the window.
  Line line(2, 40, exact(2));
  for (auto& n : line.nodes) n->runner->start_round(line.key(1));
  auto out_from = [&](std::uint64_t id) {
    return std::count_if(line.wire.frames.begin(), line.wire.frames.end(),
                         [&](const Frame& f) { return f.from == id && f.header.kind == FrameKind::scatter; });
  };
  CHECK(out_from(10) == static_cast<long>(kScatterWindow));
  CHECK(out_from(20) == static_cast<long>(kScatterWindow));
  while (!line.wire.frames.empty()) {
    Frame f = std::move(line.wire.frames.front());
    line.wire.frames.pop_front();
    line.deliver(f);
    CHECK(out_from(10) <= static_cast<long>(kScatterWindow));
    CHECK(out_from(20) <= static_cast<long>(kScatterWindow));
  }
  for (auto& n : line.nodes) {
    CHECK(n->done() == 1);
    for (std::size_t j = 0; j < 40; ++j) CHECK(n->model[j] == static_cast<float>(50 + j));
  }
}

TEST_CASE("a chunk's values are read when it goes out, not when the round starts") {
  Line line(2, 40, exact(2));
  for (auto& n : line.nodes) n->runner->start_round(line.key(1));
  // Node 10's last chunk (floats 38 and 39, in node 20's block) has not gone yet: the learner moves it now.
  line.nodes[0]->model[38] += 1000;
  line.nodes[0]->model[39] += 1000;
  line.deliver_all();
  for (auto& n : line.nodes) {
    CAPTURE(n->id);
    REQUIRE(n->done() == 1);
    CHECK(n->model[37] == 50 + 37);
    CHECK(n->model[38] == 550 + 38);  // the mean of 1038 and 138 (α = 1)
    CHECK(n->model[39] == 550 + 39);
  }
}

TEST_CASE("what the learner changes after a chunk went out is kept whole: the owner's delta is against what came") {
  for (bool direct : {true, false}) {
    CAPTURE(direct);
    allreduce::RoundConfig c = exact(2);
    c.elastic_rate = 0.5;
    Line line(2, 40, c);
    for (auto& n : line.nodes) n->direct = direct;
    for (auto& n : line.nodes) n->runner->start_round(line.key(1));
    // Node 10's first chunk of node 20's block (floats 20 and 21: 20 and 21 here, 120 and 121 there) is on the wire.
    REQUIRE(std::any_of(line.wire.frames.begin(), line.wire.frames.end(), [](const Frame& f) {
      return f.from == 10 && f.header.kind == FrameKind::scatter && f.header.offset == 20;
    }));
    line.nodes[0]->model[20] += 1000;  // a learner's step, after the send
    line.deliver_all();
    REQUIRE(line.nodes[0]->done() == 1);
    REQUIRE(line.nodes[1]->done() == 1);
    // The mean of what was sent is 70; node 10 moves half way from what it sent (20) and keeps its step: 1045.
    CHECK(line.nodes[0]->model[20] == 1045.0f);
    CHECK(line.nodes[1]->model[20] == 95.0f);  // 120 + 0.5 · (70 − 120)
    CHECK(line.nodes[0]->model[21] == 46.0f);  // 21 + 0.5 · (71 − 21)
    // The sum of the two models moved by the step alone: the round kept the line's mean.
    CHECK(line.nodes[0]->model[20] + line.nodes[1]->model[20] == 20.0f + 120.0f + 1000.0f);
  }
}

TEST_CASE("windows do not wait on each other: lines of 3, 5 and 8 complete in any delivery order") {
  for (std::uint32_t p : {3u, 5u, 8u}) {
    for (std::uint32_t seed = 1; seed <= 5; ++seed) {
      CAPTURE(p);
      CAPTURE(seed);
      Line line(p, 24 * p, exact(2));  // 12 chunks per block
      for (auto& n : line.nodes) n->runner->start_round(line.key(1));
      std::uint32_t state = seed;
      while (!line.wire.frames.empty()) {
        state = state * 1103515245u + 12345u;
        const auto at = static_cast<std::ptrdiff_t>((state >> 8) % line.wire.frames.size());
        Frame f = std::move(line.wire.frames[static_cast<std::size_t>(at)]);
        line.wire.frames.erase(line.wire.frames.begin() + at);
        line.deliver(f);
      }
      float mean0 = 0;
      for (std::uint32_t i = 0; i < p; ++i) mean0 += static_cast<float>(100 * i);
      mean0 /= static_cast<float>(p);
      for (auto& n : line.nodes) {
        CAPTURE(n->id);
        REQUIRE(n->done() == 1);
        for (std::size_t j = 0; j < 24 * p; ++j) CHECK(n->model[j] == doctest::Approx(mean0 + static_cast<float>(j)));
      }
    }
  }
}

TEST_CASE("a silent peer stops only its own block's chunks: the others complete at the deadline, every chunk sent") {
  allreduce::RoundConfig c = timeout_half();
  c.complete_threshold = 2.0 / 3.0;  // the 20 chunks of the two live blocks: every one must come through
  Line line(3, 60, c);  // 3 blocks of 20 floats, 10 chunks each: beyond every window
  run_round_without_30(line);
  for (std::uint32_t i = 0; i < 2; ++i) {
    CAPTURE(i);
    REQUIRE(line.nodes[i]->done() == 1);
    CHECK(line.nodes[i]->events.back().chunks_missing == 10);  // node 30's block, which only it could reduce
    // The two blocks of nodes 10 and 20 hold the mean of the two: (0 + 100) / 2 + index.
    for (std::size_t j = 0; j < 40; ++j) CHECK(line.nodes[i]->model[j] == static_cast<float>(50 + j));
  }
}

TEST_CASE("with two peers a chunk of our block is folded: models and frames bit for bit as three passes make them") {
  // α = 0.3 and values that do not average to round numbers, so that any change in the arithmetic would show.
  allreduce::RoundConfig c = exact(3);
  c.elastic_rate = 0.3;
  auto values = [](std::uint32_t node, std::size_t j) { return 0.1f * static_cast<float>(node * 7 + j * j) + 1e-3f; };
  auto run = [&](bool fold) {
    Line line(2, 40, c);  // blocks of 20 floats: 7 chunks each, the last one short
    for (std::uint32_t i = 0; i < 2; ++i) {
      for (std::size_t j = 0; j < 40; ++j) line.nodes[i]->model[j] = values(i, j);
      if (!fold) line.nodes[i]->access.fold = nullptr;
    }
    std::vector<std::vector<float>> reduced(2);  // the deltas each node sent, in order
    for (std::uint64_t r = 1; r <= 3; ++r) {
      for (auto& n : line.nodes) n->runner->start_round(line.key(r));
      // The learner moves node 10's model between the round's start and the first contribution's landing: a folded
      // chunk reads the model as it is when the contribution lands, as a fetch just before the reduce does.
      line.nodes[0]->model[1] += 0.5f;
      line.nodes[0]->model[25] -= 0.25f;
      while (!line.wire.frames.empty()) {
        Frame f = std::move(line.wire.frames.front());
        line.wire.frames.pop_front();
        if (f.header.kind == FrameKind::delta) {
          const std::vector<float> delta = f.floats();
          reduced[f.from == 10 ? 0 : 1].insert(reduced[f.from == 10 ? 0 : 1].end(), delta.begin(), delta.end());
        }
        line.deliver(f);
      }
      for (auto& n : line.nodes) REQUIRE(n->done() == r);
    }
    std::vector<std::vector<float>> models{line.nodes[0]->model, line.nodes[1]->model};
    std::vector<std::size_t> folds{line.nodes[0]->folded.size(), line.nodes[1]->folded.size()};
    return std::tuple(models, reduced, folds);
  };
  const auto [models_folded, means_folded, folds] = run(true);
  const auto [models_three, means_three, none] = run(false);
  CHECK(folds == std::vector<std::size_t>{21, 21});  // 7 chunks of its block a round, each once, for 3 rounds
  CHECK(none == std::vector<std::size_t>{0, 0});
  for (std::uint32_t i = 0; i < 2; ++i) {
    CAPTURE(i);
    REQUIRE(models_folded[i].size() == models_three[i].size());
    CHECK(std::memcmp(models_folded[i].data(), models_three[i].data(), models_three[i].size() * sizeof(float)) == 0);
    REQUIRE(means_folded[i].size() == 60);
    REQUIRE(means_folded[i].size() == means_three[i].size());
    CHECK(std::memcmp(means_folded[i].data(), means_three[i].data(), means_three[i].size() * sizeof(float)) == 0);
  }
  // The update did happen: node 10's float 0 moved 30% of the way to the mean of the two.
  CHECK(models_folded[0][0] != values(0, 0));
}

TEST_CASE("lines of three and five fold each chunk of a node's block at its last contribution, bit for bit") {
  for (std::uint32_t p : {3u, 5u}) {
    CAPTURE(p);
    allreduce::RoundConfig c = exact(3);
    c.elastic_rate = 0.3;
    auto run = [&](bool fold) {
      Line line(p, 20 * p, c);  // blocks of 20 floats: 7 chunks each
      for (std::uint32_t i = 0; i < p; ++i) {
        for (std::size_t j = 0; j < 20 * p; ++j)
          line.nodes[i]->model[j] = 0.1f * static_cast<float>(i * 7 + j * j) + 1e-3f;
        if (!fold) line.nodes[i]->access.fold = nullptr;
      }
      for (std::uint64_t r = 1; r <= 2; ++r) {
        for (auto& n : line.nodes) n->runner->start_round(line.key(r));
        line.nodes[0]->model[2] += 0.5f;  // the learner moves node 10's block before its contributions land
        std::uint32_t state = static_cast<std::uint32_t>(r);
        while (!line.wire.frames.empty()) {  // in a shuffled order, so that sums build up in many ways
          state = state * 1103515245u + 12345u;
          const auto at = static_cast<std::ptrdiff_t>((state >> 8) % line.wire.frames.size());
          Frame f = std::move(line.wire.frames[static_cast<std::size_t>(at)]);
          line.wire.frames.erase(line.wire.frames.begin() + at);
          line.deliver(f);
        }
        for (auto& n : line.nodes) REQUIRE(n->done() == r);
      }
      std::vector<std::vector<float>> models;
      std::size_t folds = 0;
      for (auto& n : line.nodes) {
        models.push_back(n->model);
        folds += n->folded.size();
      }
      return std::pair(models, folds);
    };
    const auto [folded, folds] = run(true);
    const auto [three, none] = run(false);
    CHECK(folds == std::size_t{p} * 7 * 2);  // every chunk of every block, in both rounds
    CHECK(none == 0);
    for (std::uint32_t i = 0; i < p; ++i) {
      CAPTURE(i);
      CHECK(std::memcmp(folded[i].data(), three[i].data(), three[i].size() * sizeof(float)) == 0);
    }
  }
}

// -- compressed lines (allreduce.wire bf16, int8) -------------------------------------------------------------------

namespace {

// Floats that int8 cannot carry exactly: varied magnitudes within each block.
float rough(std::uint32_t node, std::size_t j) {
  return 0.37f * static_cast<float>(node + 1) + 0.013f * static_cast<float>((j * 7919 + node * 31) % 1000) - 6.1f;
}

allreduce::RoundConfig on_wire(allreduce::RoundConfig c, allreduce::WireFormat wire) {
  c.wire = wire;
  return c;
}

// Node i's model: rough(i, j). (A Line is not moved: its nodes hold its wire.)
void roughen(Line& line) {
  for (std::uint32_t i = 0; i < line.nodes.size(); ++i)
    for (std::size_t j = 0; j < line.nodes[i]->model.size(); ++j) line.nodes[i]->model[j] = rough(i, j);
}

}  // namespace

TEST_CASE("a compressed line gives every node the same mean: at α = 1 the models come out the same floats") {
  for (const auto wire : {allreduce::WireFormat::bf16, allreduce::WireFormat::int8}) {
    CAPTURE(allreduce::wire_format_name(wire));
    constexpr std::size_t kFloats = 3 * 5000;
    Line line(3, kFloats, on_wire(exact(3000), wire));  // chunks of 3000: int8 blocks of 2048 and 952
    roughen(line);
    std::vector<float> mean(kFloats);
    for (std::size_t j = 0; j < kFloats; ++j) mean[j] = (rough(0, j) + rough(1, j) + rough(2, j)) / 3;
    line.round(1);
    float worst = 0;
    for (auto& n : line.nodes) {
      CAPTURE(n->id);
      REQUIRE(n->done() == 1);
      CHECK(n->counters.malformed == 0);
      CHECK(std::memcmp(n->model.data(), line.nodes[0]->model.data(), kFloats * sizeof(float)) == 0);
      for (std::size_t j = 0; j < kFloats; ++j) worst = std::max(worst, std::abs(n->model[j] - mean[j]));
    }
    // Each contribution and the mean are encoded once: |x| < 20 here, an int8 step at most 20/127, half a step
    // each way; bf16 keeps 8 bits of mantissa.
    CHECK(worst > 0);
    CHECK(worst <= (wire == allreduce::WireFormat::int8 ? 20.0f / 127 : 20.0f / 128));
  }
}

TEST_CASE("int8 on the wire sends at most 0.27 of fp32's bytes, bf16 half") {
  constexpr std::size_t kFloats = 4 * 8192;
  allreduce::RoundConfig c = exact(4096);
  c.elastic_rate = 0.5;
  auto bytes = [&](allreduce::WireFormat wire) {
    Line line(4, kFloats, on_wire(c, wire));
    roughen(line);
    std::uint64_t sent = 0;  // payload bytes, as the links count them
    for (auto& n : line.nodes) n->runner->start_round(line.key(1));
    while (!line.wire.frames.empty()) {
      Frame f = std::move(line.wire.frames.front());
      line.wire.frames.pop_front();
      sent += f.payload.size();
      line.deliver(f);
    }
    for (auto& n : line.nodes) REQUIRE(n->done() == 1);
    return static_cast<double>(sent);
  };
  const double fp32 = bytes(allreduce::WireFormat::fp32);
  CHECK(fp32 == 2.0 * 3 * kFloats * sizeof(float));  // each float out to its owner by 3 peers, and back to them
  CHECK(bytes(allreduce::WireFormat::bf16) == doctest::Approx(fp32 / 2));
  CHECK(bytes(allreduce::WireFormat::int8) <= 0.27 * fp32);
}

TEST_CASE("a compressed payload that does not decode is counted and does not count: the round goes on without it") {
  allreduce::RoundConfig c = exact(8);
  c.reduce_threshold = c.complete_threshold = 0.5;  // a line of 3 reduces a chunk from 2 of its peers
  c.elastic_rate = 0.5;
  Line line(3, 24, on_wire(c, allreduce::WireFormat::int8));
  roughen(line);
  const std::vector<float> before = line.nodes[0]->model;
  for (auto& n : line.nodes) n->runner->start_round(line.key(1));
  std::size_t spoiled = 0;
  for (Frame& f : line.wire.frames) {
    if (f.from == 20 && f.to == 10 && f.header.kind == FrameKind::scatter) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::memcpy(f.payload.data(), &nan, sizeof nan);  // the block's scale
      ++spoiled;
    }
  }
  REQUIRE(spoiled == 1);
  line.deliver_all();
  TestNode& owner = *line.nodes[0];
  CHECK(owner.counters.malformed == 1);
  CHECK(owner.done() == 1);
  // Its block was reduced over node 30's contribution and its own, not node 20's: moved halfway towards that mean.
  for (std::size_t j = 0; j < 8; ++j) {
    const float mean = (before[j] + rough(2, j)) / 2;
    CHECK(std::abs(owner.model[j] - (before[j] + 0.5f * (mean - before[j]))) <= 0.05f);
    CHECK(std::isfinite(owner.model[j]));
  }
}

TEST_CASE("error feedback: what a contribution's encoding dropped goes out with the next, across a line change") {
  // Node 20's values do not move (no update): without error feedback every round would send the same bytes, off by
  // the same error; with it the contributions' average closes in on the values.
  allreduce::RoundConfig c = exact(4096);
  c.elastic_rate = 0.5;
  constexpr std::size_t kFloats = 2 * 4096;
  Line line(2, kFloats, on_wire(c, allreduce::WireFormat::int8));
  roughen(line);
  for (auto& n : line.nodes) n->access.update = [](const allreduce::Round&, std::size_t, std::size_t, float) {};
  const std::vector<float> values = line.nodes[1]->model;
  std::vector<double> sum(4096, 0.0);  // node 20's contributions to node 10's block
  std::vector<float> first(4096);
  constexpr int kRounds = 16;
  for (int r = 1; r <= kRounds; ++r) {
    if (r == kRounds / 2) {
      // A new version of the line: the residual is the node's, and goes on.
      line.spec.layout_version += 1;
      line.start_line(0, line.spec);
      line.start_line(1, line.spec);
    }
    for (auto& n : line.nodes) n->runner->start_round(line.key(static_cast<std::uint64_t>(r)));
    for (const Frame& f : line.wire.frames) {
      if (f.from != 20 || f.header.kind != FrameKind::scatter) continue;
      std::vector<float> decoded(f.header.length);
      REQUIRE(allreduce::decode_wire(f.header.wire, f.payload, decoded).ok());
      for (std::size_t j = 0; j < decoded.size(); ++j) sum[f.header.offset + j] += decoded[j];
      const auto at = first.begin() + static_cast<std::ptrdiff_t>(f.header.offset);
      if (r == 1) std::copy(decoded.begin(), decoded.end(), at);
      // The first contribution of the new line version is not the first round's again: it carries the residual.
      if (r == kRounds / 2) CHECK_FALSE(std::equal(decoded.begin(), decoded.end(), at));
    }
    line.deliver_all();
  }
  double once = 0, averaged = 0;
  for (std::size_t j = 0; j < 4096; ++j) {
    once = std::max(once, static_cast<double>(std::abs(first[j] - values[j])));
    averaged = std::max(averaged, std::abs(sum[j] / kRounds - values[j]));
  }
  CAPTURE(once);
  CAPTURE(averaged);
  CHECK(once > 0);
  // The residual stays within one encoding's error, so the average's error falls as 1/rounds.
  CHECK(averaged <= 2 * once / kRounds);
}
