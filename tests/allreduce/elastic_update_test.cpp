#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "allreduce/elastic_update.hpp"
#include "tests/allreduce/simulated_line.hpp"

using namespace gridtrain::allreduce;
using gridtrain::allreduce::testing::Message;
using gridtrain::allreduce::testing::SimulatedLine;

TEST_CASE("an elastic rate of 1 replaces the model by the mean exactly") {
  std::vector<float> model{1, -2, 3.5f, 1e30f, 0.1f};
  const std::vector<float> mean{4, 5, -6, 1, 0.3f};
  elastic_update(model, mean, 1.0f);
  CHECK(model == mean);
}

TEST_CASE("an elastic rate of 0.5 moves the model half way to the mean") {
  std::vector<float> model{2, 4, -6, 1, 0};
  const std::vector<float> mean{4, 8, 6, 2, -3};
  elastic_update(model, mean, 0.5f);
  CHECK(model == std::vector<float>{3, 6, 0, 1.5f, -1.5f});
}

TEST_CASE("an elastic rate of 0.3 gives (1 - 0.3) * m + 0.3 * mean, within an ulp of the real value") {
  std::vector<float> model{10, 0, -5, 1000, 0.25f};
  const std::vector<float> mean{20, 10, 5, 0, 0.75f};
  const std::vector<float> before = model;
  elastic_update(model, mean, 0.3f);
  const float alpha = 0.3f;
  for (std::size_t t = 0; t < model.size(); ++t) {
    CAPTURE(t);
    CHECK(model[t] == (1.0f - alpha) * before[t] + alpha * mean[t]);
    const double exact = 0.7 * before[t] + 0.3 * mean[t];
    CHECK(std::abs(model[t] - exact) <= std::abs(exact) * 1.2e-7 + 1e-30);
  }
  CHECK(model[0] == doctest::Approx(13.0).epsilon(1e-6));
  CHECK(model[3] == doctest::Approx(700.0).epsilon(1e-6));
}

TEST_CASE("the elastic update from a round leaves slices with count 0 untouched, tensor by tensor") {
  // p = 2, N = 4, chunks of 1; q_c = 3 of 4. Peer 0 never gets the mean of chunk 3.
  const RoundConfig config{
      .reduce_threshold = 1, .complete_threshold = 0.75, .quorum = QuorumMode::fraction, .max_chunk_floats = 1};
  SimulatedLine line(4, 2, config);
  line.fill([](std::uint32_t rank, std::size_t index) { return static_cast<float>(10 * rank + index); });
  line.scatter_all();
  line.drop_if([](const Message& m) { return m.send.kind != SendKind::scatter && m.send.chunk == 3; });
  line.deliver_all();
  const Round& round = line.peer(0);
  REQUIRE(round.complete());
  REQUIRE(round.count(3) == 0);

  // Means: (t + 10 + t) / 2 = t + 5; peer 0 fetched t. The model has moved to 100 since the fetch, and keeps
  // that move: 100 + alpha * (mean - fetched) = 100 + 5 alpha.
  for (float alpha : {1.0f, 0.5f, 0.3f}) {
    CAPTURE(alpha);
    std::vector<float> whole(4, 100.0f), pieces(4, 100.0f);
    elastic_update(std::span<float>(whole), 0, round, alpha);
    // The same update as three tensors, [0,1), [1,3) and [3,4), each on its own.
    elastic_update(std::span<float>(pieces).subspan(0, 1), 0, round, alpha);
    elastic_update(std::span<float>(pieces).subspan(1, 2), 1, round, alpha);
    elastic_update(std::span<float>(pieces).subspan(3, 1), 3, round, alpha);
    std::vector<float> expected(4, 100.0f);
    for (std::size_t t = 0; t < 3; ++t) {
      const float fetched = static_cast<float>(t);
      expected[t] = ((1.0f - alpha) * fetched + alpha * (fetched + 5.0f)) + (100.0f - fetched);
      CHECK(expected[t] == doctest::Approx(100.0f + 5.0f * alpha));
    }
    CHECK(whole == expected);
    CHECK(pieces == expected);
    CHECK(whole[3] == 100.0f);  // untouched: no mean came
  }
  std::vector<float> replaced(4, 100.0f);
  elastic_update(std::span<float>(replaced), 0, round, 1.0f);
  CHECK(replaced == std::vector<float>{105, 105, 105, 100});
}

TEST_CASE("a peer the owner counted adds its delta; one it did not count gets the mean, applied against its copy") {
  // p = 3, N = 3, one chunk per block, θr = 2 of 3. Peer 2's contribution to chunk 0 is lost: peer 0 reduces it over
  // peers 0 and 1, (0 + 10) / 2 = 5, and sends peer 1 its delta, 5 − 10, and peer 2 the mean.
  const RoundConfig config{
      .reduce_threshold = 2.0 / 3, .complete_threshold = 1, .quorum = QuorumMode::fraction, .max_chunk_floats = 1};
  SimulatedLine line(3, 3, config);
  line.fill([](std::uint32_t rank, std::size_t index) { return static_cast<float>(10 * rank + index); });
  line.scatter_all();
  line.drop_if([](const Message& m) { return m.send.kind == SendKind::scatter && m.from == 2 && m.send.to == 0; });
  line.deliver_all();
  REQUIRE(line.peer(1).count(0) == 2);
  REQUIRE(line.peer(2).count(0) == 2);
  CHECK(line.peer(1).delta(0));
  CHECK(line.peer(1).result()[0] == -5.0f);
  CHECK_FALSE(line.peer(2).delta(0));
  CHECK(line.peer(2).result()[0] == 5.0f);
  // Both models have moved to 100 since they sent: peer 1 keeps that move and adds half its delta; peer 2 keeps it
  // and moves by half of the mean less its copy of the chunk, 20 (a data plane that kept no copy makes one as the
  // mean comes: then it moves half way from where it is).
  float m1 = 100, m2 = 100;
  elastic_update(std::span<float>(&m1, 1), 0, line.peer(1), 0.5f);
  elastic_update(std::span<float>(&m2, 1), 0, line.peer(2), 0.5f);
  CHECK(m1 == 97.5f);
  CHECK(m2 == 92.5f);
}

TEST_CASE("with an elastic rate of 1 every peer gets the mean, and every model becomes the same floats") {
  // Deltas would leave each peer s + (mean − s): the mean within a rounding. With α = 1 the peers must agree.
  const RoundConfig config{.reduce_threshold = 1,
                           .complete_threshold = 1,
                           .quorum = QuorumMode::fraction,
                           .max_chunk_floats = 2,
                           .elastic_rate = 1};
  SimulatedLine line(6, 3, config);
  line.fill([](std::uint32_t rank, std::size_t index) { return 0.1f * static_cast<float>(rank * rank + index) + 1e-3f; });
  line.scatter_all();
  line.deliver_all();
  std::vector<std::vector<float>> models;
  for (std::uint32_t r = 0; r < 3; ++r) {
    REQUIRE(line.peer(r).complete());
    CHECK_FALSE(line.peer(r).deltas());
    std::vector<float> m(line.peer(r).send_buffer().begin(), line.peer(r).send_buffer().end());
    elastic_update(std::span<float>(m), 0, line.peer(r), 1.0f);
    models.push_back(m);
  }
  for (std::size_t t = 0; t < 6; ++t) {
    CAPTURE(t);
    CHECK(models[0][t] == line.expected_mean(static_cast<std::uint32_t>(t / 2), t));
    CHECK(models[1][t] == models[0][t]);
    CHECK(models[2][t] == models[0][t]);
  }
}

TEST_CASE("a round that every peer applies keeps the line's sum, even when the models moved during the round") {
  // p = 3, N = 5. While the round runs, each peer's model moves by its own amount (a learner step, a round of
  // another dimension): each keeps its move, and the sum over the peers changes by exactly the sum of the moves.
  SimulatedLine line(5, 3,
                     RoundConfig{.reduce_threshold = 1, .complete_threshold = 1, .quorum = QuorumMode::fraction,
                                 .max_chunk_floats = 2});
  line.fill([](std::uint32_t rank, std::size_t index) { return static_cast<float>(rank * rank) + 0.25f * index; });
  line.scatter_all();
  line.deliver_all();
  const float moves[3] = {1.5f, -4.0f, 0.25f};
  for (std::size_t t = 0; t < 5; ++t) {
    float before = 0, after = 0;
    for (std::uint32_t r = 0; r < 3; ++r) {
      REQUIRE(line.peer(r).complete());
      float m = line.peer(r).send_buffer()[t] + moves[r];
      before += m;
      std::span<float> one(&m, 1);
      elastic_update(one, t, line.peer(r), 0.3f);
      after += m;
    }
    CHECK(after == doctest::Approx(before).epsilon(1e-6));
  }
}

TEST_CASE("elastic_pull collects what the update would add, where means came, and the update applied later agrees") {
  // The round of the count-0 test above (chunk 3 has no mean at peer 0) and the delta test's two peers: for each, the
  // pull added to a buffer that already holds a pending pull, then added to a model that moved meanwhile, gives the
  // in-place update of the moved model within a rounding, and leaves the floats without a mean as they were.
  const RoundConfig config{
      .reduce_threshold = 1, .complete_threshold = 0.75, .quorum = QuorumMode::fraction, .max_chunk_floats = 1};
  SimulatedLine line(4, 2, config);
  line.fill([](std::uint32_t rank, std::size_t index) { return static_cast<float>(10 * rank + index); });
  line.scatter_all();
  line.drop_if([](const Message& m) { return m.send.kind != SendKind::scatter && m.send.chunk == 3; });
  line.deliver_all();
  for (std::uint32_t r = 0; r < 2; ++r) {
    const Round& round = line.peer(r);
    REQUIRE(round.complete());
    for (float alpha : {1.0f, 0.5f, 0.3f}) {
      CAPTURE(r);
      CAPTURE(alpha);
      std::vector<float> pull(4, 0.25f), in_place(4, 100.0f);
      // In pieces, as a store's tensors take it: [0, 1), [1, 3), [3, 4).
      elastic_pull(std::span<float>(pull).subspan(0, 1), 0, round, alpha);
      elastic_pull(std::span<float>(pull).subspan(1, 2), 1, round, alpha);
      elastic_pull(std::span<float>(pull).subspan(3, 1), 3, round, alpha);
      elastic_update(std::span<float>(in_place), 0, round, alpha);
      for (std::size_t t = 0; t < 4; ++t) {
        CAPTURE(t);
        if (round.count(static_cast<std::uint32_t>(t)) == 0) {
          CHECK(pull[t] == 0.25f);  // nothing came: the pending pull stays as it was
          continue;
        }
        CHECK(100.0f + (pull[t] - 0.25f) == doctest::Approx(in_place[t]).epsilon(1e-6));
      }
    }
  }
  // A delta: the pull is exactly alpha * delta.
  SimulatedLine three(3, 3,
                      RoundConfig{.reduce_threshold = 2.0 / 3, .complete_threshold = 1, .quorum = QuorumMode::fraction,
                                  .max_chunk_floats = 1});
  three.fill([](std::uint32_t rank, std::size_t index) { return static_cast<float>(10 * rank + index); });
  three.scatter_all();
  three.drop_if([](const Message& m) { return m.send.kind == SendKind::scatter && m.from == 2 && m.send.to == 0; });
  three.deliver_all();
  REQUIRE(three.peer(1).delta(0));
  float pull = 0;
  elastic_pull(std::span<float>(&pull, 1), 0, three.peer(1), 0.5f);
  CHECK(pull == -2.5f);
  // The mean against the copy: 0.5 * (5 - 20).
  REQUIRE_FALSE(three.peer(2).delta(0));
  pull = 0;
  elastic_pull(std::span<float>(&pull, 1), 0, three.peer(2), 0.5f);
  CHECK(pull == -7.5f);
}

TEST_CASE("reduce_chunk gives the reference's floats for 1 to 5 other peers, with and without ours, folded or not") {
  // The reference: the sum in double, ours first and then the peers' in order, times 1/n; each delta
  // float(mean - theirs); a fold's update (1 - α) s + α float(mean). The reduce has a one-pass loop for one to
  // three other peers and an L1-tiled one beyond: both must give these floats exactly, over a length that is not a
  // multiple of a tile or a vector and from an index `at` inside the contributions.
  const std::size_t n = 1031, at = 7;
  const float alpha = 0.3f, keep = 1.0f - alpha;
  auto value = [](std::uint32_t who, std::size_t t) {
    return static_cast<float>(std::sin(0.37 * static_cast<double>(t) + who)) * (1.0f + static_cast<float>(who));
  };
  for (std::uint32_t k = 1; k <= 5; ++k) {
    for (const int shape : {0, 1, 2, 3, 4}) {  // 0-1: ours read (deltas or not); 2-4: folded (deltas, mean, both)
      const bool fold = shape >= 2;
      const bool deltas = shape == 0 || shape == 2 || shape == 4;
      const bool with_mean = shape <= 1 || shape >= 3;
      for (const bool with_own : {true, false}) {
        if (fold && !with_own) continue;  // a fold always has ours (the model)
        if (!with_own && k < 2) continue;  // the mean of one contribution alone is not a reduce the Round makes
        CAPTURE(k);
        CAPTURE(shape);
        CAPTURE(with_own);
        std::vector<float> own(n), model(n), mean(n, -1.0f);
        std::vector<std::vector<float>> theirs(k, std::vector<float>(at + n));
        for (std::size_t t = 0; t < n; ++t) own[t] = model[t] = value(0, t);
        for (std::uint32_t q = 0; q < k; ++q)
          for (std::size_t t = 0; t < at + n; ++t) theirs[q][t] = value(q + 1, t);
        const auto before = theirs;
        std::vector<float*> pointers;
        for (auto& v : theirs) pointers.push_back(v.data());
        const double inv = 1.0 / (k + (with_own ? 1 : 0));
        reduce_chunk(n, fold || !with_own ? nullptr : own.data(), pointers.data(), k, at, inv,
                     with_mean ? mean.data() : nullptr, deltas, fold ? model.data() : nullptr, alpha);
        for (std::size_t t = 0; t < n; ++t) {
          double sum = with_own ? static_cast<double>(own[t]) : 0.0;
          for (std::uint32_t q = 0; q < k; ++q) sum += before[q][at + t];
          const double mu = sum * inv;
          if (with_mean) REQUIRE(mean[t] == static_cast<float>(mu));
          for (std::uint32_t q = 0; q < k; ++q)
            REQUIRE(theirs[q][at + t] == (deltas ? static_cast<float>(mu - before[q][at + t]) : before[q][at + t]));
          REQUIRE(model[t] == (fold ? keep * own[t] + alpha * static_cast<float>(mu) : own[t]));
        }
        for (std::uint32_t q = 0; q < k; ++q)  // nothing before `at` touched
          for (std::size_t t = 0; t < at; ++t) REQUIRE(theirs[q][t] == before[q][t]);
      }
    }
  }
}
