// One round, case by case, with exact expected values. Peer r fills its send buffer with
// 10 * r + index, so a mean over any set of peers is easy to write down.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "allreduce/elastic_update.hpp"
#include "tests/allreduce/simulated_line.hpp"

using namespace gridtrain::allreduce;
using gridtrain::allreduce::testing::mean_held;
using gridtrain::allreduce::testing::means_held;
using gridtrain::allreduce::testing::Message;
using gridtrain::allreduce::testing::SimulatedLine;

namespace {

const RoundKey kKey{.epoch = 3, .layout_version = 9, .dim = 1, .line = 4, .round = 20};

RoundConfig config(double reduce, double complete, QuorumMode mode, std::uint32_t chunk = 1 << 16) {
  return RoundConfig{
      .reduce_threshold = reduce, .complete_threshold = complete, .quorum = mode, .max_chunk_floats = chunk};
}

void fill_tens(SimulatedLine& line) {
  line.fill([](std::uint32_t rank, std::size_t index) { return static_cast<float>(10 * rank + index); });
}

auto scatter_from_to(std::uint32_t from, std::uint32_t to) {
  return [=](const Message& m) { return m.send.kind == SendKind::scatter && m.from == from && m.send.to == to; };
}

// The mean or the delta that `from` sends `to`.
auto reduced_from_to(std::uint32_t from, std::uint32_t to) {
  return [=](const Message& m) { return m.send.kind != SendKind::scatter && m.from == from && m.send.to == to; };
}

std::vector<std::uint32_t> counts_of(const Round& round) {
  std::vector<std::uint32_t> counts;
  for (std::uint32_t c = 0; c < round.partition().chunk_count(); ++c) counts.push_back(round.count(c));
  return counts;
}

}  // namespace

TEST_CASE("scatter sends block j to peer j chunk by chunk, starting at the right-hand neighbour, never to itself") {
  // N = 10, p = 4, chunks of 2: blocks [0,3) [3,6) [6,9) [9,10);
  // chunks 0:[0,2) 1:[2,3) 2:[3,5) 3:[5,6) 4:[6,8) 5:[8,9) 6:[9,10).
  Round round = Round::create(kKey, 10, 4, 1, config(1, 1, QuorumMode::fraction, 2)).value();
  for (std::size_t t = 0; t < 10; ++t) round.send_buffer()[t] = static_cast<float>(t);
  const std::span<const Send> sends = round.scatter();
  struct Expected {
    std::uint32_t to, chunk;
    std::size_t offset, length;
  };
  const Expected expected[] = {{2, 4, 6, 2}, {2, 5, 8, 1}, {3, 6, 9, 1}, {0, 0, 0, 2}, {0, 1, 2, 1}};
  REQUIRE(sends.size() == std::size(expected));
  for (std::size_t k = 0; k < sends.size(); ++k) {
    CAPTURE(k);
    CHECK(sends[k].kind == SendKind::scatter);
    CHECK(sends[k].to == expected[k].to);
    CHECK(sends[k].chunk == expected[k].chunk);
    CHECK(sends[k].offset == expected[k].offset);
    CHECK(sends[k].count == 1);
    CHECK(sends[k].data.size() == expected[k].length);
    CHECK(sends[k].data.data() == round.send_buffer().data() + expected[k].offset);  // no copy
  }
  CHECK_FALSE(round.complete());
  CHECK(round.scatter().empty());  // a second call sends nothing

  Round last = Round::create(kKey, 10, 3, 2, config(1, 1, QuorumMode::fraction)).value();
  const auto wrapped = last.scatter();
  REQUIRE(wrapped.size() == 2);
  CHECK(wrapped[0].to == 0);  // (2 + 1) mod 3
  CHECK(wrapped[1].to == 1);
}

TEST_CASE("a line of one peer completes at scatter with its own values as the mean") {
  Round round = Round::create(kKey, 5, 1, 0, config(1, 1, QuorumMode::timeout, 2)).value();
  for (std::size_t t = 0; t < 5; ++t) round.send_buffer()[t] = 1.5f * static_cast<float>(t);
  CHECK(round.scatter().empty());
  CHECK(round.complete());
  CHECK(counts_of(round) == std::vector<std::uint32_t>{1, 1, 1});
  CHECK(means_held(round) == std::vector<float>{0, 1.5f, 3, 4.5f, 6});
}

TEST_CASE("a round over an empty model completes at scatter with nothing to send") {
  Round round = Round::create(kKey, 0, 3, 1, config(1, 1, QuorumMode::timeout)).value();
  CHECK_FALSE(round.complete());
  CHECK(round.scatter().empty());
  CHECK(round.complete());
  CHECK(round.counters().missing_at_completion == 0);
}

TEST_CASE("a round refuses an index outside its line") {
  CHECK(Round::create(kKey, 10, 3, 3, config(1, 1, QuorumMode::fraction)).error().message.find("our index") !=
        std::string::npos);
  CHECK(Round::create(kKey, 10, 0, 0, config(1, 1, QuorumMode::fraction)).error().message.find("one peer") !=
        std::string::npos);
}

TEST_CASE("contributions that arrive before scatter are kept, and nothing is reduced before it") {
  // p = 2, N = 2: block 0 is [0,1), block 1 is [1,2). q_r = 1: any single contribution suffices.
  SimulatedLine line(2, 2, config(0.5, 0.5, QuorumMode::fraction), kKey);
  fill_tens(line);
  line.scatter(1);
  CHECK(line.deliver(line.take(scatter_from_to(1, 0))) == Verdict::accepted);
  // Peer 0 has not started: it reduces nothing and sends nothing yet.
  CHECK(std::none_of(line.pending().begin(), line.pending().end(), [](const Message& m) { return m.from == 0; }));
  CHECK(line.peer(0).count(0) == 0);
  // With q_c = 1 of 2 chunks, peer 1's mean alone would complete the round: not before scatter.
  CHECK(line.deliver(line.take(reduced_from_to(1, 0))) == Verdict::accepted);
  CHECK(line.peer(0).count(1) == 1);
  CHECK_FALSE(line.peer(0).complete());
  line.scatter(0);  // its own contribution joins the early one
  CHECK(line.peer(0).count(0) == 2);
  CHECK(mean_held(line.peer(0), 0) == 5.0f);  // (0 + 10) / 2
  CHECK(line.peer(0).complete());
  line.deliver_all();
  CHECK(line.all_complete());
}

TEST_CASE("a deadline that passes before scatter reduces nothing until our own contribution is in") {
  // Timeout mode, p = 4, q_r = 2: the early parts of peers 1 and 2 would make a quorum.
  SimulatedLine line(4, 4, config(0.5, 1, QuorumMode::timeout), kKey);
  fill_tens(line);
  line.scatter(1);
  line.scatter(2);
  line.deliver_if([](const Message& m) { return m.send.to == 0; });
  line.deadline(0);
  CHECK(line.peer(0).count(0) == 0);
  CHECK(std::none_of(line.pending().begin(), line.pending().end(), [](const Message& m) { return m.from == 0; }));
  line.scatter(0);
  CHECK(line.peer(0).count(0) == 3);  // ours included; peer 3's part is not needed after the deadline
  CHECK(mean_held(line.peer(0), 0) == 10.0f);  // (0 + 10 + 20) / 3
}

TEST_CASE("a missed scatter chunk is averaged over the contributions received, and the count is reported") {
  // p = 3, N = 6, one chunk per block. Timeout mode with q_r = 2: without peer 2's part, peer 0
  // waits for the deadline, then averages peers 0 and 1.
  SimulatedLine line(6, 3, config(2.0 / 3, 1, QuorumMode::timeout), kKey);
  fill_tens(line);
  line.scatter_all();
  CHECK(line.drop_if(scatter_from_to(2, 0)) == 1);
  line.deliver_all();
  CHECK(line.peer(0).count(0) == 0);
  CHECK_FALSE(line.peer(1).complete());
  line.deadline(0);
  line.deliver_all();
  CHECK(line.all_complete());
  for (std::uint32_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(counts_of(line.peer(i)) == std::vector<std::uint32_t>{2, 3, 3});
    // block 0: (0 + 10) / 2, (1 + 11) / 2; blocks 1 and 2: (t + 10 + t + 20 + t) / 3 = t + 10.
    CHECK(means_held(line.peer(i)) == std::vector<float>{5, 6, 12, 13, 14, 15});
    CHECK(line.peer(i).counters().missing_at_completion == 0);
  }
  CHECK(line.peer(0).counters().short_reductions == 1);
  CHECK(line.peer(1).counters().short_reductions == 0);
}

TEST_CASE("a contribution that arrives after its chunk was reduced is dropped and counted as late") {
  // Fraction mode, q_r = 2: peer 0 reduces as soon as peer 1's part joins its own.
  SimulatedLine line(6, 3, config(2.0 / 3, 1, QuorumMode::fraction), kKey);
  fill_tens(line);
  line.scatter_all();
  const Message from_two = line.take(scatter_from_to(2, 0));
  CHECK(line.deliver(line.take(scatter_from_to(1, 0))) == Verdict::accepted);
  CHECK(line.peer(0).count(0) == 2);
  CHECK(line.deliver(from_two) == Verdict::late);
  CHECK(line.peer(0).counters().late == 1);
  CHECK(line.peer(0).count(0) == 2);
  CHECK(mean_held(line.peer(0), 0) == 5.0f);  // still (0 + 10) / 2
  CHECK(mean_held(line.peer(0), 1) == 6.0f);
}

TEST_CASE("a reduced chunk that arrives after completion is dropped and counted as late") {
  // C = 3 chunks, q_c = 2: peer 0 completes with its own block and one other.
  SimulatedLine line(6, 3, config(1, 2.0 / 3, QuorumMode::fraction), kKey);
  fill_tens(line);
  line.scatter_all();
  line.deliver_if([](const Message& m) { return m.send.kind == SendKind::scatter; });
  CHECK(line.deliver(line.take(reduced_from_to(1, 0))) == Verdict::accepted);
  REQUIRE(line.peer(0).complete());
  CHECK(line.deliver(line.take(reduced_from_to(2, 0))) == Verdict::late);
  CHECK(line.peer(0).counters().late == 1);
  CHECK(counts_of(line.peer(0)) == std::vector<std::uint32_t>{3, 3, 0});
  CHECK(line.peer(0).counters().missing_at_completion == 1);
}

TEST_CASE("a missed reduced chunk means no update: that slice keeps the model's current values") {
  SimulatedLine line(6, 3, config(1, 2.0 / 3, QuorumMode::fraction), kKey);
  fill_tens(line);
  line.scatter_all();
  line.deliver_if([](const Message& m) { return m.send.kind == SendKind::scatter; });
  CHECK(line.drop_if(reduced_from_to(2, 0)) == 1);
  line.deliver_all();
  const Round& round = line.peer(0);
  REQUIRE(round.complete());
  CHECK(counts_of(round) == std::vector<std::uint32_t>{3, 3, 0});
  CHECK(round.counters().missing_at_completion == 1);

  // The learner moved the model since the fetch (which held 0..5).
  std::vector<float> model{100, 101, 102, 103, 104, 105};
  // Two tensors, [0,3) and [3,6), each updated on its own as under its lock.
  elastic_update(std::span<float>(model).first(3), 0, round, 0.5f);
  elastic_update(std::span<float>(model).subspan(3), 3, round, 0.5f);
  // Where a mean came (t + 10): the learner's move is kept, plus half the pull from the fetched t to the mean:
  // 100 + t + 0.5 * (t + 10 - t) = 105 + t. Elsewhere: untouched.
  CHECK(model == std::vector<float>{105, 106, 107, 108, 104, 105});
}

TEST_CASE("a newer round key makes the round finish with what it has, and peers get exact means") {
  // Thresholds of 1: without peer 2's part, peer 0's block is never reduced by quorum.
  SimulatedLine line(6, 3, config(1, 1, QuorumMode::fraction), kKey);
  fill_tens(line);
  line.scatter_all();
  const Message held = line.take(scatter_from_to(2, 0));
  line.deliver_all();
  CHECK_FALSE(line.peer(0).complete());
  CHECK(counts_of(line.peer(0)) == std::vector<std::uint32_t>{0, 3, 3});

  RoundKey next = kKey;
  next.round += 1;
  const Outcome newer = line.peer(0).on_scatter({next, 1, 0, line.peer(1).send_buffer().first(2)});
  CHECK(newer.verdict == Verdict::newer);
  CHECK(newer.sends.empty());
  CHECK(line.peer(0).counters().newer == 1);
  CHECK_FALSE(line.peer(0).complete());  // the caller decides to finish, not the round

  line.finish(0);
  CHECK(line.peer(0).complete());
  CHECK(line.pending().size() == 2);  // the mean of block 0, over 2, to peers 1 and 2
  line.deliver_all();
  CHECK(line.deliver(held) == Verdict::late);
  CHECK(line.all_complete());
  for (std::uint32_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(counts_of(line.peer(i)) == std::vector<std::uint32_t>{2, 3, 3});
    CHECK(means_held(line.peer(i)) == std::vector<float>{5, 6, 12, 13, 14, 15});
  }
  CHECK(line.peer(0).finish().empty());  // once is enough
}

TEST_CASE("finish reduces a chunk of our block below quorum but not one that has no contribution") {
  Round round = Round::create(kKey, 4, 2, 0, config(1, 1, QuorumMode::fraction, 1)).value();  // our chunks: 0 and 1
  // Not started: only peer 1's part of chunk 1 has come.
  const float values[] = {7, 9};
  CHECK(round.on_scatter({kKey, 1, 1, std::span<const float>(values).first(1)}).verdict == Verdict::accepted);
  const auto sends = round.finish();
  REQUIRE(sends.size() == 1);
  CHECK(sends[0].chunk == 1);
  CHECK(sends[0].count == 1);
  CHECK(sends[0].kind == SendKind::delta);  // peer 1's contribution is the mean: its delta is 0
  CHECK(sends[0].data[0] == 0.0f);
  CHECK(round.result()[1] == 7.0f);
  CHECK(round.complete());
  CHECK(counts_of(round) == std::vector<std::uint32_t>{0, 1, 0, 0});
  CHECK(round.counters().missing_at_completion == 3);
  CHECK(round.scatter().empty());  // a finished round sends nothing more
  CHECK(round.on_scatter({kKey, 1, 0, std::span<const float>(values).first(1)}).verdict == Verdict::late);
}

TEST_CASE("after completing, a round still reduces its own block so that slower peers get the mean") {
  // p = 4, N = 8, one chunk per block, q_c = 3 of 4 chunks.
  SimulatedLine line(8, 4, config(1, 0.75, QuorumMode::fraction), kKey);
  fill_tens(line);
  line.scatter_all();
  const Message held = line.take(scatter_from_to(3, 0));  // peer 0 cannot reduce block 0 yet
  line.deliver_if([](const Message& m) { return m.send.kind == SendKind::scatter; });
  CHECK(line.drop_if(reduced_from_to(2, 1)) == 1);  // peer 1 stays one chunk short
  line.deliver_all();
  REQUIRE(line.peer(0).complete());  // blocks 1, 2 and 3
  CHECK(line.peer(0).count(0) == 0);
  CHECK_FALSE(line.peer(1).complete());  // blocks 1 and 3 only

  CHECK(line.deliver(held) == Verdict::accepted);
  CHECK(line.peer(0).count(0) == 4);
  CHECK(line.pending().size() == 3);  // the mean of block 0, to peers 1, 2 and 3
  line.deliver_all();
  CHECK(line.peer(1).complete());
  CHECK(line.peer(1).count(0) == 4);
  CHECK(mean_held(line.peer(1), 0) == 15.0f);  // (0 + 10 + 20 + 30) / 4
  CHECK(line.peer(2).counters().late == 1);  // already complete: the mean came too late for it
}

TEST_CASE("means_in_order lists each chunk once, in the order its mean came, after completion too") {
  // p = 4, N = 8, one chunk per block, q_c = 3 of 4 chunks: peer 0's own block is reduced last, after completion.
  SimulatedLine line(8, 4, config(1, 0.75, QuorumMode::fraction), kKey);
  fill_tens(line);
  line.scatter_all();
  const Message held = line.take(scatter_from_to(3, 0));
  line.deliver_all();
  REQUIRE(line.peer(0).complete());
  const auto before = line.peer(0).means_in_order();
  CHECK(before.size() == 3);
  CHECK(std::find(before.begin(), before.end(), 0u) == before.end());
  CHECK(line.deliver(held) == Verdict::accepted);
  const auto after = line.peer(0).means_in_order();
  REQUIRE(after.size() == 4);
  CHECK(after.back() == 0);
  std::vector<std::uint32_t> sorted(after.begin(), after.end());
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<std::uint32_t>{0, 1, 2, 3});
  // Peer 1 reduced its own block (chunk 1) before any other mean could come to it.
  CHECK(line.peer(1).means_in_order().front() == 1);
}

TEST_CASE("a message with an older round key is dropped as stale and counted, without touching the round") {
  SimulatedLine line(6, 3, config(1, 1, QuorumMode::fraction), kKey);
  fill_tens(line);
  line.scatter_all();
  Round& round = line.peer(0);
  const auto part = line.peer(1).send_buffer().first(2);
  RoundKey older_round = kKey, older_layout = kKey, older_epoch = kKey;
  older_round.round -= 1;
  older_layout.layout_version -= 1;
  older_layout.round += 5;  // a later round of an older layout is still older
  older_epoch.epoch -= 1;
  older_epoch.layout_version += 5;
  for (const RoundKey& old : {older_round, older_layout, older_epoch}) {
    CHECK(round.on_scatter({old, 1, 0, part}).verdict == Verdict::stale);
    CHECK(round.on_reduced({old, 1, 2, 3, line.peer(1).send_buffer().subspan(2, 2)}).verdict == Verdict::stale);
  }
  CHECK(round.counters().stale == 6);
  CHECK(round.count(1) == 0);
  line.deliver_all();
  CHECK(line.all_complete());
  CHECK(means_held(round) == std::vector<float>{10, 11, 12, 13, 14, 15});
  CHECK(line.verdicts(Verdict::accepted) == 12);  // 6 scatters + 6 reduced
}

TEST_CASE("in timeout mode nothing is reduced below all p before the deadline, and a quorum suffices after it") {
  // p = 4, N = 4: one float per block. q_r = 2, q_c = 2.
  SimulatedLine line(4, 4, config(0.5, 0.5, QuorumMode::timeout), kKey);
  fill_tens(line);
  line.scatter_all();
  CHECK(line.drop_if([](const Message& m) { return m.from == 3; }) == 3);
  line.deliver_all();
  // Peers 0-2 hold 3 of 4 parts, far above q_r, and still wait; peer 3 had all 4 and reduced.
  for (std::uint32_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(line.peer(i).count(i) == 0);
    CHECK(line.peer(i).count(3) == 4);
    CHECK_FALSE(line.peer(i).complete());  // 1 of 4 chunks; q_c = 2 does not count before the deadline
  }
  line.deadline(0);
  CHECK(line.peer(0).count(0) == 3);
  CHECK(mean_held(line.peer(0), 0) == 10.0f);  // (0 + 10 + 20) / 3
  CHECK(line.peer(0).complete());            // chunks 0 and 3: q_c after the deadline
  CHECK(line.peer(0).counters().missing_at_completion == 2);

  line.deliver_if(reduced_from_to(0, 1));
  CHECK(line.peer(1).count(0) == 3);
  CHECK_FALSE(line.peer(1).complete());  // 2 of 4 chunks, but its deadline has not passed
  line.deadline(1);
  CHECK(line.peer(1).complete());
  CHECK(mean_held(line.peer(1), 1) == 11.0f);  // (1 + 11 + 21) / 3
}

TEST_CASE("below q_r, the deadline reduces nothing, and the chunk is reduced when the quorum comes") {
  // p = 4, q_r = 3.
  SimulatedLine line(4, 4, config(0.75, 1, QuorumMode::timeout), kKey);
  fill_tens(line);
  line.scatter_all();
  line.deadline(0);
  CHECK(line.peer(0).count(0) == 0);  // only its own part
  line.deliver_if(scatter_from_to(1, 0));
  CHECK(line.peer(0).count(0) == 0);  // 2 < 3
  line.deliver_if(scatter_from_to(3, 0));
  CHECK(line.peer(0).count(0) == 3);
  CHECK(mean_held(line.peer(0), 0) == 40.0f / 3.0f);  // (0 + 10 + 30) / 3
}

TEST_CASE("in fraction mode the deadline changes nothing") {
  SimulatedLine line(4, 4, config(1, 1, QuorumMode::fraction), kKey);
  fill_tens(line);
  line.scatter_all();
  line.drop_if(scatter_from_to(3, 0));
  line.deliver_all();
  line.deadline(0);
  CHECK(line.pending().empty());
  CHECK(line.peer(0).count(0) == 0);
  CHECK_FALSE(line.peer(0).complete());
}

TEST_CASE("a duplicate message is counted once and reported as duplicate") {
  SimulatedLine line(6, 3, config(1, 1, QuorumMode::fraction), kKey);
  fill_tens(line);
  line.scatter_all();
  const Message scatter = line.pending().front();  // peer 0's part of block 1, to peer 1
  line.deliver_all();
  CHECK(line.deliver(scatter) == Verdict::duplicate);
  Message reduced = scatter;
  reduced.from = 1;
  reduced.send = {SendKind::reduced, 0, 1, 2, 3, line.peer(1).result().subspan(2, 2), {}};
  CHECK(line.deliver(reduced) == Verdict::duplicate);
  CHECK(line.peer(1).counters().duplicate == 1);
  CHECK(line.peer(0).counters().duplicate == 1);
  CHECK(means_held(line.peer(0)) == std::vector<float>{10, 11, 12, 13, 14, 15});
}

TEST_CASE("malformed messages are rejected and counted without touching the round") {
  // p = 3, N = 6, chunks of 1: blocks [0,2) [2,4) [4,6); peer 0 owns chunks 0 and 1.
  SimulatedLine line(6, 3, config(1, 1, QuorumMode::fraction, 1), kKey);
  fill_tens(line);
  line.scatter_all();
  Round& round = line.peer(0);
  const float junk[] = {1e30f, -1e30f, 7};
  const std::span<const float> one(junk, 1), two(junk, 2), none;
  const std::size_t huge = std::numeric_limits<std::size_t>::max();
  const std::uint32_t nobody = std::numeric_limits<std::uint32_t>::max();
  RoundKey other_line = kKey;
  other_line.line += 1;
  RoundKey other_dim = kKey;
  other_dim.dim += 1;

  const ScatterChunk bad_scatter[] = {
      {kKey, 1, 2, one},         // a chunk of block 1: not ours to reduce
      {kKey, 1, 0, two},         // too long
      {kKey, 1, 0, none},        // empty
      {kKey, 1, 6, one},         // past the end
      {kKey, 1, huge, one},      // far past the end
      {kKey, 3, 0, one},         // sender outside the line
      {kKey, nobody, 0, one},    // ... far outside
      {kKey, 0, 0, one},         // ourselves
      {other_line, 1, 0, one},   // another line
      {other_dim, 1, 0, one},    // another dimension
  };
  for (const ScatterChunk& m : bad_scatter) {
    CAPTURE(m.offset);
    CAPTURE(m.from);
    const Outcome out = round.on_scatter(m);
    CHECK(out.verdict == Verdict::malformed);
    CHECK(out.sends.empty());
  }
  const ReducedChunk bad_reduced[] = {
      {kKey, 1, 2, 0, one},         // count 0
      {kKey, 1, 2, 4, one},         // count > p
      {kKey, 1, 4, 3, one},         // block 2 comes from peer 2, not peer 1
      {kKey, 0, 0, 3, one},         // ourselves
      {kKey, 5, 2, 3, one},         // sender outside the line
      {kKey, 1, 2, 3, two},         // too long
      {kKey, 1, 3, 3, none},        // empty
      {kKey, 1, huge, 3, one},      // past the end
      {other_line, 1, 2, 3, one},   // another line
  };
  for (const ReducedChunk& m : bad_reduced) {
    CAPTURE(m.offset);
    CAPTURE(m.from);
    CAPTURE(m.count);
    const Outcome out = round.on_reduced(m);
    CHECK(out.verdict == Verdict::malformed);
    CHECK(out.sends.empty());
  }
  CHECK(round.counters().malformed == std::size(bad_scatter) + std::size(bad_reduced));
  CHECK(counts_of(round) == std::vector<std::uint32_t>{0, 0, 0, 0, 0, 0});

  line.deliver_all();
  CHECK(line.all_complete());
  CHECK(counts_of(round) == std::vector<std::uint32_t>{3, 3, 3, 3, 3, 3});
  CHECK(means_held(round) == std::vector<float>{10, 11, 12, 13, 14, 15});
}

TEST_CASE("reset runs the next round in the same buffers: exact means, nothing of the last round left over") {
  // Round 20 averages 10·r + index, round 21 averages 100·r - index, with a message lost in each: a sum, count or
  // flag that survived reset() would show in round 21's means or counts.
  SimulatedLine line(6, 3, config(0.5, 1, QuorumMode::fraction, 2), kKey);
  fill_tens(line);
  line.scatter_all();
  line.deliver_all();
  REQUIRE(line.all_complete());
  const float* buffer = line.peer(0).result().data();

  RoundKey next = kKey;
  next.round = 21;
  line.reset(next);
  for (std::uint32_t i = 0; i < 3; ++i) {
    CHECK_FALSE(line.peer(i).started());
    CHECK_FALSE(line.peer(i).complete());
    CHECK(line.peer(i).received_chunks() == 0);
    CHECK(line.peer(i).counters().late == 0);
  }
  line.fill([](std::uint32_t rank, std::size_t index) { return 100.0f * rank - static_cast<float>(index); });
  line.scatter_all();
  line.drop_if(scatter_from_to(2, 0));  // block 0's first chunk is averaged over peers 0 and 1 only
  line.deliver_all();
  REQUIRE(line.all_complete());
  // Each chunk is the mean over the contributions its reducer counted in round 21 (θr = 0.5: the first two), and
  // every peer has every chunk (θc = 1).
  CHECK(line.contributors(0) == std::vector<std::uint32_t>{0, 1});
  for (std::uint32_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    const Round& round = line.peer(i);
    for (std::uint32_t c = 0; c < 3; ++c) {
      CHECK(round.count(c) == line.contributors(c).size());
      for (std::size_t index = 2 * c; index < 2 * c + 2; ++index)
        CHECK(mean_held(round, index) == line.expected_mean(c, index));
    }
  }
  CHECK(mean_held(line.peer(1), 0) == 50);
  CHECK(mean_held(line.peer(1), 1) == 49);
  CHECK(line.peer(0).result().data() == buffer);  // the same memory: nothing was allocated
  // A message of the last round is stale now.
  CHECK(line.peer(0).on_scatter({kKey, 1, 0, line.peer(1).send_buffer().first(2)}).verdict == Verdict::stale);
}

TEST_CASE("reshape runs a round of a new line version in the old Round's buffers, with exact means") {
  // Peer 2 of a line of 3 becomes peer 1 of a line of 2 (a member left): the same model, other blocks.
  Round old = Round::create(kKey, 6, 3, 2, config(1, 1, QuorumMode::fraction, 2)).value();
  const float* send = old.send_buffer().data();
  const float* result = old.result().data();
  RoundKey next = kKey;
  next.layout_version = 10;
  next.round = 0;
  CHECK_FALSE(old.reshape(next, 6, 2, 2, config(1, 1, QuorumMode::fraction, 2)).ok());  // self >= peers
  REQUIRE(old.reshape(next, 6, 2, 1, config(1, 1, QuorumMode::fraction, 2)).ok());
  CHECK(old.send_buffer().data() == send);  // the model-sized buffers are kept
  CHECK(old.result().data() == result);
  CHECK(old.key() == next);
  CHECK_FALSE(old.started());

  SimulatedLine line(6, 2, config(1, 1, QuorumMode::fraction, 2), next);
  line.peer(1) = std::move(old);
  fill_tens(line);
  line.scatter_all();
  line.deliver_all();
  REQUIRE(line.all_complete());
  for (std::uint32_t i = 0; i < 2; ++i)
    for (std::size_t index = 0; index < 6; ++index) CHECK(mean_held(line.peer(i), index) == 5.0f + index);
  CHECK(line.peer(1).send_buffer().data() == send);
}

TEST_CASE("a reduced chunk read straight into the result counts once its payload is there, as on_reduced counts it") {
  SimulatedLine line(6, 3, config(1, 1, QuorumMode::fraction, 2), kKey);
  fill_tens(line);
  line.scatter_all();
  line.deliver_if([](const Message& m) { return m.send.kind == SendKind::scatter; });
  const Message mean = line.take(reduced_from_to(1, 0));  // block 1's mean less peer 0's contribution, for peer 0
  REQUIRE(mean.send.kind == SendKind::delta);
  Round& peer0 = line.peer(0);

  // The header is checked before a byte of the payload is read: a chunk that is not block 1's, a count above p.
  CHECK(peer0.reduced_target(kKey, 1, 4, 2, 3, true).verdict == Verdict::malformed);
  CHECK(peer0.reduced_target(kKey, 1, 2, 2, 4, true).verdict == Verdict::malformed);
  CHECK(peer0.reduced_target(kKey, 1, 2, 3, 3, true).verdict == Verdict::malformed);
  RoundKey older = kKey;
  older.round -= 1;
  CHECK(peer0.reduced_target(older, 1, 2, 2, 3, true).verdict == Verdict::stale);

  const PayloadTarget target =
      peer0.reduced_target(kKey, 1, mean.send.offset, mean.send.data.size(), mean.send.count, true);
  REQUIRE(target.verdict == Verdict::accepted);
  CHECK(target.into.data() == peer0.result().data() + 2);
  CHECK(target.into.size() == 2);
  CHECK(peer0.count(target.chunk) == 0);  // nothing counted before the payload is in
  std::copy(mean.send.data.begin(), mean.send.data.end(), target.into.begin());
  CHECK(peer0.reduced_arrived(target.chunk, mean.send.count, true).verdict == Verdict::accepted);
  CHECK(peer0.count(target.chunk) == 3);
  CHECK(peer0.reduced_arrived(target.chunk, mean.send.count, true).verdict == Verdict::duplicate);
  CHECK(peer0.reduced_target(kKey, 1, 2, 2, 3, true).verdict == Verdict::duplicate);

  line.deliver_all();
  REQUIRE(peer0.complete());
  CHECK(means_held(peer0) == std::vector<float>{10, 11, 12, 13, 14, 15});
  CHECK(peer0.counters().malformed == 3);
  CHECK(peer0.counters().stale == 1);
}

TEST_CASE("with two peers a contribution folds: its delta and our update as the reduce over a copy and the update") {
  // N = 8, p = 2, chunks of 2: our block (peer 0) is [0,4), chunks 0 and 1.
  const RoundConfig cfg = config(1, 1, QuorumMode::fraction, 2);
  Round folding = Round::create(kKey, 8, 2, 0, cfg).value();
  Round plain = Round::create(kKey, 8, 2, 0, cfg).value();
  const std::vector<float> theirs{0.5f, 1.25f};
  const ScatterChunk in{kKey, 1, 2, theirs};  // chunk 1, from peer 1

  CHECK_FALSE(folding.fold_target(1, 1));  // before scatter our own contribution is not counted yet
  std::vector<float> model{3, 4, 5.5f, 6.75f, 7, 8, 9, 10};
  std::copy(model.begin(), model.end(), plain.send_buffer().begin());
  folding.scatter(model);  // our values for the other block go out from the model; none are copied
  plain.scatter();

  // The header is checked before the payload lands.
  RoundKey older = kKey;
  older.round -= 1;
  CHECK(folding.contribution_target(older, 1, 2, 2).verdict == Verdict::stale);
  CHECK(folding.contribution_target(kKey, 1, 4, 2).verdict == Verdict::malformed);  // peer 1's block: not ours
  CHECK(folding.contribution_target(kKey, 0, 2, 2).verdict == Verdict::malformed);  // from ourselves
  CHECK(folding.contribution_target(kKey, 1, 2, 1).verdict == Verdict::malformed);  // not a chunk
  CHECK(folding.counters().malformed == 3);
  CHECK(folding.counters().stale == 1);
  const PayloadTarget landing = folding.contribution_target(kKey, 1, 2, 2);
  REQUIRE(landing.verdict == Verdict::accepted);
  CHECK(landing.chunk == 1);
  REQUIRE(landing.into.size() == 2);
  std::copy(theirs.begin(), theirs.end(), landing.into.begin());

  CHECK_FALSE(folding.fold_target(1, 0));  // from ourselves
  const std::optional<FoldTarget> target = folding.fold_target(1, 1);
  REQUIRE(target);
  CHECK(target->chunk == 1);
  CHECK(target->from == 1);
  REQUIRE(target->theirs.size() == 1);
  CHECK(target->theirs[0] == landing.into.data());
  CHECK(target->inv == 0.5);
  CHECK(folding.count(1) == 0);  // nothing counted before the caller reports it
  std::vector<float> folded_model = model;
  fold_chunk(std::span<float>(folded_model).subspan(2, 2), *target, 0, 0.3f);
  const Outcome folded = folding.folded(*target);
  const Outcome reduced = plain.on_scatter(in);
  REQUIRE(folded.verdict == Verdict::accepted);
  REQUIRE(reduced.verdict == Verdict::accepted);
  REQUIRE(folded.sends.size() == 1);
  REQUIRE(reduced.sends.size() == 1);
  CHECK(folded.sends[0].kind == SendKind::delta);  // peer 1's contribution counted: it gets the mean less it
  CHECK(reduced.sends[0].kind == SendKind::delta);
  CHECK(folded.sends[0].to == reduced.sends[0].to);
  CHECK(folded.sends[0].chunk == reduced.sends[0].chunk);
  CHECK(folded.sends[0].count == 2);
  CHECK(std::vector<float>(folded.sends[0].data.begin(), folded.sends[0].data.end()) ==
        std::vector<float>(reduced.sends[0].data.begin(), reduced.sends[0].data.end()));
  CHECK(folded.sends[0].data[0] == 2.5f);  // (5.5 + 0.5) / 2 - 0.5
  CHECK(folded.sends[0].data[1] == 2.75f);  // (6.75 + 1.25) / 2 - 1.25
  CHECK(folding.count(1) == 2);
  CHECK(std::vector<std::uint32_t>(folding.means_in_order().begin(), folding.means_in_order().end()) ==
        std::vector<std::uint32_t>{1});

  // The model as the three passes leave it: the copy, the mean, the update.
  std::vector<float> three = model;
  elastic_update(three, 0, plain, 0.3f);
  CHECK(folded_model[2] == three[2]);
  CHECK(folded_model[3] == three[3]);
  CHECK(folded_model[2] != model[2]);

  // Once in, the same contribution neither folds again nor counts twice.
  CHECK_FALSE(folding.fold_target(1, 1));
  CHECK(folding.on_scatter(in).verdict == Verdict::duplicate);
  CHECK(folding.counters().short_reductions == 0);
}

TEST_CASE("with three peers the last contribution folds, over the others in peer order; ours is read only then") {
  // N = 9, p = 3, chunks of 3: our block (peer 0) is [0,3), one chunk.
  const RoundConfig cfg = config(1, 1, QuorumMode::fraction, 3);
  Round folding = Round::create(kKey, 9, 3, 0, cfg).value();
  Round plain = Round::create(kKey, 9, 3, 0, cfg).value();
  const std::vector<float> model{1.5f, -2, 7.25f};
  const std::vector<float> first{1, 2, 3}, last{0.5f, 0.25f, -4};
  // Our values are in neither send buffer yet: the first contribution waits without them.
  folding.scatter();
  plain.scatter();
  // Peer 2's comes first here: the sum's order is the peers' all the same.
  CHECK(folding.on_scatter({kKey, 2, 0, last}).sends.empty());
  CHECK(plain.on_scatter({kKey, 2, 0, last}).sends.empty());

  const PayloadTarget landing = folding.contribution_target(kKey, 1, 0, 3);
  REQUIRE(landing.verdict == Verdict::accepted);
  std::copy(first.begin(), first.end(), landing.into.begin());
  CHECK(folding.reduces_with(0, 1));
  const std::optional<FoldTarget> target = folding.fold_target(0, 1);
  REQUIRE(target);
  REQUIRE(target->theirs.size() == 2);
  CHECK(target->theirs[0] == landing.into.data());  // peer 1's, then peer 2's
  CHECK(target->theirs[1][2] == -4.0f);
  CHECK(target->inv == doctest::Approx(1.0 / 3));
  std::vector<float> folded_model = model;
  fold_chunk(folded_model, *target, 0, 0.3f);
  const Outcome folded = folding.folded(*target);

  std::copy(model.begin(), model.end(), plain.send_buffer().begin());  // ours, just before the reduce
  const Outcome reduced = plain.on_scatter({kKey, 1, 0, first});
  REQUIRE(folded.sends.size() == 2);
  REQUIRE(reduced.sends.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(folded.sends[i].count == 3);
    CHECK(folded.sends[i].kind == SendKind::delta);
    CHECK(folded.sends[i].to == reduced.sends[i].to);
    CHECK(std::vector<float>(folded.sends[i].data.begin(), folded.sends[i].data.end()) ==
          std::vector<float>(reduced.sends[i].data.begin(), reduced.sends[i].data.end()));
  }
  CHECK(folded.sends[0].to == 1);
  CHECK(folded.sends[0].data[0] == 0.0f);  // (1.5 + 1 + 0.5) / 3 - 1
  CHECK(folded.sends[1].data[0] == 0.5f);  // the same mean - 0.5
  std::vector<float> three = model;
  elastic_update(three, 0, plain, 0.3f);
  CHECK(folded_model == three);
  CHECK(folded_model != model);
}

TEST_CASE("below all p, a quorum reduces without folding: a delta to the peer counted, the mean to the one not") {
  // Fraction mode, θr = 2/3 of 3: ours and one more make the quorum; that one is not the last the chunk could get.
  Round round = Round::create(kKey, 9, 3, 0, config(2.0 / 3, 1, QuorumMode::fraction, 3)).value();
  round.scatter();
  const std::vector<float> theirs{1, 2, 3};
  const PayloadTarget landing = round.contribution_target(kKey, 1, 0, 3);
  REQUIRE(landing.verdict == Verdict::accepted);
  std::copy(theirs.begin(), theirs.end(), landing.into.begin());
  CHECK(round.reduces_with(0, 1));
  CHECK_FALSE(round.fold_target(0, 1));
  round.send_buffer()[0] = 5;  // the caller copies our values out first
  round.send_buffer()[1] = 6;
  round.send_buffer()[2] = 7;
  const Outcome out = round.contribution_arrived(0, 1);
  REQUIRE(out.sends.size() == 2);
  CHECK(out.sends[0].to == 1);
  CHECK(out.sends[0].kind == SendKind::delta);
  CHECK(std::vector<float>(out.sends[0].data.begin(), out.sends[0].data.end()) == std::vector<float>{2, 2, 2});
  CHECK(out.sends[1].to == 2);
  CHECK(out.sends[1].kind == SendKind::reduced);  // peer 2's contribution is not in it: it gets the mean
  CHECK(std::vector<float>(out.sends[1].data.begin(), out.sends[1].data.end()) == std::vector<float>{3, 4, 5});
  CHECK_FALSE(round.reduces_with(0, 2));  // reduced already: late
  CHECK(round.contribution_target(kKey, 2, 0, 3).verdict == Verdict::late);
}

TEST_CASE("waits_only_on: a round that misses only an absent peer's parts says so; one that misses others' does not") {
  // p = 3, N = 3: one float a block. Peer 2 is absent: neither its contributions nor its block's mean come.
  SimulatedLine line(3, 3, config(0.5, 0.5, QuorumMode::timeout), kKey);
  fill_tens(line);
  const std::vector<std::uint8_t> absent_2{0, 0, 1}, none{0, 0, 0};
  CHECK_FALSE(line.peer(0).waits_only_on(absent_2));  // not started
  line.scatter(0);
  line.scatter(1);
  CHECK_FALSE(line.peer(0).waits_only_on(absent_2));  // peer 1's contribution to block 0 is still on its way
  line.deliver_if([](const Message& m) { return m.from != 2 && m.send.to != 2 && m.send.kind == SendKind::scatter; });
  // Block 0 still waits for peer 2's contribution (the timeout quorum acts only after the deadline), block 2 for
  // peer 2's mean, and block 1's mean from peer 1 is not here yet.
  CHECK_FALSE(line.peer(0).waits_only_on(absent_2));
  line.deadline(1);  // peer 1 reduces block 1 with ours and its own, and sends its mean
  line.deliver_if([](const Message& m) { return m.from == 1 && m.send.to == 0; });
  CHECK(line.peer(0).waits_only_on(absent_2));  // what is left is peer 2's: its contribution, its block
  CHECK_FALSE(line.peer(0).waits_only_on(none));
  line.deadline(0);
  CHECK(line.peer(0).complete());
  CHECK_FALSE(line.peer(0).waits_only_on(absent_2));  // complete: nothing to wait for
}

TEST_CASE("missing_contributions names the peers our block waits on; block_waits_only_on, whether only absent ones") {
  // p = 3, N = 3: one float a block. Peer 2 is late: its contributions are held back.
  SimulatedLine line(3, 3, config(0.5, 0.5, QuorumMode::timeout), kKey);
  fill_tens(line);
  const std::vector<std::uint8_t> absent_2{0, 0, 1}, none{0, 0, 0};
  std::vector<std::uint8_t> missing(3, 7);
  line.peer(0).missing_contributions(missing);
  CHECK(missing == none);  // not started
  CHECK_FALSE(line.peer(0).block_waits_only_on(absent_2));
  line.scatter(0);
  line.scatter(1);
  line.scatter(2);
  line.peer(0).missing_contributions(missing);
  CHECK(missing == std::vector<std::uint8_t>{0, 1, 1});  // block 0 waits for peers 1 and 2
  CHECK_FALSE(line.peer(0).block_waits_only_on(absent_2));
  line.deliver_if([](const Message& m) { return m.from == 1 && m.send.kind == SendKind::scatter; });
  line.peer(0).missing_contributions(missing);
  CHECK(missing == absent_2);
  // Peer 2's block waits on peer 2's own mean, but our block only on its contribution: enough for the probe.
  CHECK(line.peer(0).block_waits_only_on(absent_2));
  CHECK_FALSE(line.peer(0).waits_only_on(absent_2));  // peer 1's mean of block 1 has not come
  CHECK_FALSE(line.peer(0).block_waits_only_on(none));
  line.deliver_all();
  line.peer(0).missing_contributions(missing);
  CHECK(missing == none);
  CHECK_FALSE(line.peer(0).block_waits_only_on(absent_2));  // nothing left to wait for
}
