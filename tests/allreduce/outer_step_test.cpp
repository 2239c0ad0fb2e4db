// The outer step (allreduce/outer_step.hpp): DiLoCo's Nesterov step on the pseudo-gradient anchor - mean, the
// learner's steps since the fetch kept whole, and steps that landed between a fetch and its mean counted once.

#include <doctest/doctest.h>

#include <vector>

#include "allreduce/outer_step.hpp"
#include "tests/allreduce/simulated_line.hpp"

using namespace gridtrain::allreduce;
using gridtrain::allreduce::testing::Message;
using gridtrain::allreduce::testing::SimulatedLine;

TEST_CASE("an outer rate of 1 without momentum is plain averaging: the mean, plus the steps since the fetch") {
  std::vector<float> model{1.5f, -2, 3};  // the learner moved it by 0.5, 0, -1 since the fetch
  const std::vector<float> fetched{1, -2, 4};
  const std::vector<float> mean{3, 0, -4};
  std::vector<float> outer{1, -2, 4}, velocity(3, 0.0f);
  const std::vector<float> anchor = outer;
  outer_step(model, fetched, mean, anchor, outer, velocity, {.rate = 1.0f, .momentum = 0.0f});
  CHECK(outer == mean);
  CHECK(model == std::vector<float>{3.5f, 0, -5});
  CHECK(velocity == std::vector<float>{-2, -2, 8});  // g = outer - mean, kept as the momentum of a later step
}

TEST_CASE("two outer steps follow PyTorch's SGD with Nesterov momentum on the pseudo-gradient") {
  // One float: o = 10; the line's mean 8, then 7. PyTorch: v = mu v + g; o -= eta (g + mu v).
  const float eta = 0.7f, mu = 0.9f;
  std::vector<float> model{10}, outer{10}, velocity{0};
  outer_step(model, std::vector<float>{10}, std::vector<float>{8}, std::vector<float>{10}, outer, velocity, {eta, mu});
  // g = 2, v = 2, o = 10 - 0.7 (2 + 1.8) = 7.34; nothing moved the model since the fetch: m = o.
  CHECK(velocity[0] == doctest::Approx(2.0f));
  CHECK(outer[0] == doctest::Approx(7.34f));
  CHECK(model[0] == outer[0]);
  const float fetched = model[0];
  model[0] -= 0.25f;  // a learner step after the next fetch
  const float anchor = outer[0];
  outer_step(model, std::vector<float>{fetched}, std::vector<float>{7}, std::vector<float>{anchor}, outer, velocity,
             {eta, mu});
  // g = 0.34, v = 1.8 + 0.34 = 2.14, o = 7.34 - 0.7 (0.34 + 1.926) = 5.7538; the learner's step kept.
  CHECK(velocity[0] == doctest::Approx(2.14f));
  CHECK(outer[0] == doctest::Approx(5.7538f));
  CHECK(model[0] == doctest::Approx(5.7538f - 0.25f));
}

TEST_CASE("the outer step from a round moves only the floats with a mean, outer and momentum included") {
  // p = 2, N = 4, chunks of 1; peer 0 never gets the mean of chunk 3 (as the elastic update's test).
  const RoundConfig config{.reduce_threshold = 1,
                           .complete_threshold = 0.75,
                           .quorum = QuorumMode::fraction,
                           .max_chunk_floats = 1,
                           .outer = OuterMode::nesterov};
  SimulatedLine line(4, 2, config);
  line.fill([](std::uint32_t rank, std::size_t index) { return static_cast<float>(10 * rank + index); });
  line.scatter_all();
  line.drop_if([](const Message& m) { return m.send.kind != SendKind::scatter && m.send.chunk == 3; });
  line.deliver_all();
  const Round& round = line.peer(0);
  REQUIRE(round.complete());
  REQUIRE(round.count(3) == 0);
  REQUIRE_FALSE(round.delta(0));  // the outer step takes means, not deltas

  // Peer 0 fetched t; means t + 5. Its outer parameters are where it fetched; the model moved by +1 since.
  const OuterRates rates{.rate = 0.5f, .momentum = 0.9f};
  std::vector<float> whole{1, 2, 3, 4}, outer{0, 1, 2, 3}, velocity{0, 0, 0, 7};
  std::vector<float> pieces = whole, outer_pieces = outer, velocity_pieces = velocity;
  const std::vector<float> anchor = outer;
  outer_update(whole, outer, velocity, 0, round, anchor, rates);
  // As two tensors, [0, 2) and [2, 4).
  outer_update(std::span<float>(pieces).subspan(0, 2), std::span<float>(outer_pieces).subspan(0, 2),
               std::span<float>(velocity_pieces).subspan(0, 2), 0, round, anchor, rates);
  outer_update(std::span<float>(pieces).subspan(2, 2), std::span<float>(outer_pieces).subspan(2, 2),
               std::span<float>(velocity_pieces).subspan(2, 2), 2, round, anchor, rates);
  for (std::size_t t = 0; t < 3; ++t) {
    CAPTURE(t);
    // g = t - (t + 5) = -5; v = -5; o' = t - 0.5 (-5 - 4.5) = t + 4.75; m = o' + 1.
    CHECK(velocity[t] == -5.0f);
    CHECK(outer[t] == doctest::Approx(t + 4.75f));
    CHECK(whole[t] == doctest::Approx(t + 5.75f));
  }
  CHECK(whole[3] == 4.0f);  // no mean came: untouched
  CHECK(outer[3] == 3.0f);
  CHECK(velocity[3] == 7.0f);
  CHECK(pieces == whole);
  CHECK(outer_pieces == outer);
  CHECK(velocity_pieces == velocity);
}

TEST_CASE("a line whose nodes start alike and step alike stays alike: the outer step keeps a replica") {
  // Every peer of a line applies the same mean to the same outer state: their outer parameters stay equal, however
  // far their models were apart when fetched.
  const RoundConfig config{.max_chunk_floats = 2, .outer = OuterMode::nesterov};
  SimulatedLine line(6, 3, config);
  line.fill([](std::uint32_t rank, std::size_t index) { return static_cast<float>(rank * rank) - index; });
  line.scatter_all();
  line.deliver_all();
  std::vector<std::vector<float>> outers;
  for (std::uint32_t r = 0; r < 3; ++r) {
    REQUIRE(line.peer(r).complete());
    std::vector<float> model(6), outer(6, 1.0f), velocity(6, 0.5f);
    for (std::size_t t = 0; t < 6; ++t) model[t] = static_cast<float>(r * r) - t;  // as fetched
    const std::vector<float> anchor = outer;
    outer_update(model, outer, velocity, 0, line.peer(r), anchor, {.rate = 0.7f, .momentum = 0.9f});
    for (std::size_t t = 0; t < 6; ++t)  // nothing moved since the fetch: the model is its outer parameters
      CHECK(model[t] == doctest::Approx(outer[t]).epsilon(1e-6));
    outers.push_back(outer);
  }
  CHECK(outers[1] == outers[0]);
  CHECK(outers[2] == outers[0]);
}

TEST_CASE("a step that lands between another round's fetch and its mean is counted once") {
  // One float, two rounds fetched at once (two dimensions, or rounds in flight): s = a = o = 0. Round A's mean comes
  // first and moves m and o; round B's mean, fetched before that move, comes after.
  const OuterRates rates{.rate = 0.7f, .momentum = 0.9f};
  std::vector<float> model{0}, outer{0}, velocity{0};
  const std::vector<float> fetched{0}, anchor{0};
  outer_step(model, fetched, std::vector<float>{2}, anchor, outer, velocity, rates);
  // g = -2, v = -2, d = -0.7 (-2 - 1.8) = 2.66.
  CHECK(outer[0] == doctest::Approx(2.66f));
  CHECK(model[0] == doctest::Approx(2.66f));
  outer_step(model, fetched, std::vector<float>{0}, anchor, outer, velocity, rates);
  // g = 0, v = -1.8, d = -0.7 (0 - 1.62) = 1.134: m and o both 2.66 + 1.134. Setting m to o' + (m - s) would have
  // counted A's 2.66 twice.
  CHECK(velocity[0] == doctest::Approx(-1.8f));
  CHECK(outer[0] == doctest::Approx(3.794f));
  CHECK(model[0] == doctest::Approx(3.794f));
}

TEST_CASE("without momentum, overlapping outer steps add up as the elastic update with rate 1 does") {
  // Two rounds fetched at once, the learner stepping between: each moves m by mean - s, whatever landed meanwhile.
  const OuterRates plain{.rate = 1.0f, .momentum = 0.0f};
  std::vector<float> model{1, 5}, outer{1, 5}, velocity{0, 0};
  const std::vector<float> fetched = model, anchor = outer;
  model[0] += 0.5f;  // a learner step
  outer_step(model, fetched, std::vector<float>{3, 1}, anchor, outer, velocity, plain);
  CHECK(model == std::vector<float>{3.5f, 1});
  model[1] -= 0.25f;
  outer_step(model, fetched, std::vector<float>{0, 7}, anchor, outer, velocity, plain);
  CHECK(model[0] == doctest::Approx(3.5f + (0 - 1)));
  CHECK(model[1] == doctest::Approx(0.75f + (7 - 5)));
}

TEST_CASE("a mean of this node's model alone gets no outer step") {
  // p = 2, θr 0.5 with a fraction quorum: each node reduces its block from its own values at once; peer 1's
  // contributions to peer 0's block never come, and the mean of peer 0's block is its own model.
  const RoundConfig config{.reduce_threshold = 0.5,
                           .complete_threshold = 1,
                           .quorum = QuorumMode::fraction,
                           .max_chunk_floats = 1,
                           .outer = OuterMode::nesterov};
  SimulatedLine line(4, 2, config);
  line.fill([](std::uint32_t rank, std::size_t index) { return static_cast<float>(10 * rank + index); });
  line.scatter_all();
  line.drop_if([](const Message& m) { return m.send.kind == SendKind::scatter; });
  line.deliver_all();
  const Round& round = line.peer(0);
  REQUIRE(round.complete());
  REQUIRE(round.count(0) == 1);  // peer 0's block: its own model only
  REQUIRE(round.count(2) == 1);  // peer 1's block: peer 1's model only, as peer 1 sent it
  std::vector<float> model{0, 1, 2, 3}, outer{0, 1, 2, 3}, velocity{1, 1, 1, 1};
  const std::vector<float> anchor = outer;
  outer_update(model, outer, velocity, 0, round, anchor, {.rate = 0.7f, .momentum = 0.9f});
  CHECK(model == std::vector<float>{0, 1, 2, 3});
  CHECK(outer == std::vector<float>{0, 1, 2, 3});
  CHECK(velocity == std::vector<float>{1, 1, 1, 1});
}
