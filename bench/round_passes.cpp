// The CPU a training node's averaging round spends outside the sockets, pass by pass, on one core: what separates a
// gridtrain round from a bare allreduce (MPI_Allreduce, Gloo) of the same size, which makes only the socket copies
// and one reduce.
//
// Two peers' Rounds (allreduce/round.hpp) over two ParameterStores, driven in one thread with no I/O: each chunk is
// snapshot from the store (ParameterStore::fetch_range, as the data plane does just before sending it), the peer's
// chunk landed and reduced into the mean and its delta (Round::on_scatter), the deltas exchanged (Round::on_reduced:
// a copy, standing in for the socket's receive), and the elastic update applied chunk by chunk
// (allreduce::elastic_update, under the tensor locks). Timed for peer 0 alone, phase by phase, each a pass over the
// model or its half as the data plane makes it. Then the same round as the data plane makes it over TCP with two
// peers: our values for the other block sent straight from the store (no pass), our block folded
// (Round::fold_target: our values, the mean, the delta and the update in one pass, allreduce::fold_chunk under the
// tensor locks), the other block updated from the deltas. For scale, two passes any allreduce of N floats makes or
// needs: a memcpy of the model (a socket copy moves as many bytes) and a bare reduce of half of it (a[i] += b[i],
// MPI's part with two processes).
//
//   bench_round_passes [--floats 16777216] [--chunk 262144] [--repeats 5]
//
// Prints per phase the median of the repeats, in ms, for one node and one round.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "allreduce/elastic_update.hpp"
#include "allreduce/round.hpp"
#include "base/large_buffer.hpp"
#include "bench/median.hpp"
#include "learner/parameter_store.hpp"

namespace {

using namespace gridtrain;
using bench::median;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

[[gnu::noinline]] void add_run(std::size_t n, float* __restrict a, const float* __restrict b) {
  for (std::size_t t = 0; t < n; ++t) a[t] += b[t];
}

long parse_positive(const char* flag, const char* text) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0) {
    std::fprintf(stderr, "bench_round_passes: %s wants a positive integer, got '%s'\n", flag, text);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t floats = 16777216;
  std::uint32_t chunk = 262144;
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 < argc && a == "--floats") {
      floats = static_cast<std::size_t>(parse_positive("--floats", argv[++i]));
    } else if (i + 1 < argc && a == "--chunk") {
      chunk = static_cast<std::uint32_t>(parse_positive("--chunk", argv[++i]));
    } else if (i + 1 < argc && a == "--repeats") {
      repeats = static_cast<int>(parse_positive("--repeats", argv[++i]));
    } else {
      std::fprintf(stderr, "usage: bench_round_passes [--floats N] [--chunk C] [--repeats R]\n");
      return 2;
    }
  }

  allreduce::RoundConfig config;
  config.quorum = allreduce::QuorumMode::fraction;
  config.reduce_threshold = config.complete_threshold = 1.0;
  config.max_chunk_floats = chunk;
  const float alpha = static_cast<float>(config.elastic_rate);

  const std::vector<learner::TensorSpec> model{{"w", {static_cast<int>(floats)}}};
  learner::ParameterStore store0(model), store1(model);
  learner::ParameterStore* stores[2] = {&store0, &store1};
  std::vector<allreduce::Round> rounds;
  rounds.reserve(2);
  for (std::uint32_t p = 0; p < 2; ++p) {
    stores[p]->update_each([&](std::size_t, std::span<float> v) {
      for (std::size_t t = 0; t < v.size(); ++t) v[t] = static_cast<float>((t + p) % 1000) * 1e-3f;
    });
    auto round = allreduce::Round::create({1, 1, 0, 0, 0}, floats, 2, p, config);
    if (!round) {
      std::fprintf(stderr, "bench_round_passes: %s\n", round.error().message.c_str());
      return 2;
    }
    rounds.push_back(std::move(round).value());
  }
  const allreduce::Partition& part = rounds[0].partition();
  LargeBuffer<float> copy_to(floats), reduce_a(floats / 2), reduce_b(floats / 2);
  std::fill(reduce_a.begin(), reduce_a.end(), 1.0f);
  std::fill(reduce_b.begin(), reduce_b.end(), 2.0f);

  std::vector<double> snapshot, reduce, exchange, update, memcpy_ms, bare_reduce, fold_other, fold_own;
  for (int rep = 0; rep < repeats + 1; ++rep) {  // the first repeat touches every page: not counted
    for (std::uint32_t p = 0; p < 2; ++p) rounds[p].reset({1, 1, 0, 0, static_cast<std::uint64_t>(rep)});
    auto t = Clock::now();
    for (std::uint32_t c = 0; c < part.chunk_count(); ++c) {
      const allreduce::Range r = part.chunk(c);
      stores[0]->fetch_range(r.offset, rounds[0].send_buffer().subspan(r.offset, r.length));
    }
    const double snap = ms_since(t);
    stores[1]->fetch(rounds[1].send_buffer());
    std::vector<allreduce::Send> to_peer[2];
    for (std::uint32_t p = 0; p < 2; ++p) {
      const auto sends = rounds[p].scatter();
      to_peer[p].assign(sends.begin(), sends.end());
    }
    // Peer 0 reduces its block from peer 1's chunks; the means it sends are what peer 1 receives.
    std::vector<allreduce::Send> means[2];
    t = Clock::now();
    for (const auto& s : to_peer[1]) {
      const auto out = rounds[0].on_scatter({rounds[0].key(), 1, s.offset, s.data});
      means[0].insert(means[0].end(), out.sends.begin(), out.sends.end());
    }
    const double red = ms_since(t);
    for (const auto& s : to_peer[0]) {
      const auto out = rounds[1].on_scatter({rounds[1].key(), 0, s.offset, s.data});
      means[1].insert(means[1].end(), out.sends.begin(), out.sends.end());
    }
    t = Clock::now();
    for (const auto& s : means[1])
      rounds[0].on_reduced({rounds[0].key(), 1, s.offset, s.count, s.data, s.kind == allreduce::SendKind::delta});
    const double exch = ms_since(t);
    if (!rounds[0].complete()) {
      std::fprintf(stderr, "bench_round_passes: the round did not complete\n");
      return 1;
    }
    t = Clock::now();
    for (std::uint32_t c = 0; c < part.chunk_count(); ++c) {
      const allreduce::Range r = part.chunk(c);
      stores[0]->update_range(r.offset, r.offset + r.length, [&](std::size_t offset, std::span<float> values) {
        allreduce::elastic_update(values, offset, rounds[0], alpha);
      });
    }
    const double upd = ms_since(t);
    // The round as the data plane runs it over TCP with two peers: our values for peer 1's block go out straight
    // from the store (nothing copied), peer 1's chunks of our block land (the socket's copy, not timed) and fold,
    // and peer 1's deltas update the other block.
    for (std::uint32_t p = 0; p < 2; ++p) rounds[p].reset({1, 1, 0, 0, static_cast<std::uint64_t>(rep) + 1000});
    const allreduce::Range other = part.block(1);
    stores[1]->fetch(rounds[1].send_buffer());
    const auto direct = rounds[0].scatter(stores[0]->arena());
    std::vector<allreduce::Send> from_model(direct.begin(), direct.end());
    rounds[1].scatter();  // its chunks for peer 0 are to_peer[1]'s: the same offsets, now from this round's buffer
    for (const auto& s : to_peer[1]) {
      const auto landing = rounds[0].contribution_target(rounds[0].key(), 1, s.offset, s.data.size());
      std::copy(s.data.begin(), s.data.end(), landing.into.begin());
    }
    t = Clock::now();
    for (const auto& s : to_peer[1]) {
      const auto target = rounds[0].fold_target(part.chunk_containing(s.offset), 1);
      if (!target) {
        std::fprintf(stderr, "bench_round_passes: a chunk of our block did not fold\n");
        return 1;
      }
      stores[0]->update_range(s.offset, s.offset + s.data.size(), [&](std::size_t offset, std::span<float> values) {
        allreduce::fold_chunk(values, *target, offset - s.offset, alpha);
      });
      rounds[0].folded(*target);
    }
    const double folding = ms_since(t);
    for (const auto& s : from_model) {
      const auto out = rounds[1].on_scatter({rounds[1].key(), 0, s.offset, s.data});
      for (const auto& d : out.sends)
        rounds[0].on_reduced({rounds[0].key(), 1, d.offset, d.count, d.data, d.kind == allreduce::SendKind::delta});
    }
    if (!rounds[0].complete()) {
      std::fprintf(stderr, "bench_round_passes: the folded round did not complete\n");
      return 1;
    }
    t = Clock::now();
    stores[0]->update_range(other.offset, other.offset + other.length, [&](std::size_t offset, std::span<float> v) {
      allreduce::elastic_update(v, offset, rounds[0], alpha);
    });
    const double other_ms = ms_since(t);

    t = Clock::now();
    stores[0]->fetch(std::span<float>(copy_to));
    const double mc = ms_since(t);
    t = Clock::now();
    add_run(reduce_a.size(), reduce_a.data(), reduce_b.data());
    const double bare = ms_since(t);
    if (rep == 0) continue;
    snapshot.push_back(snap);
    reduce.push_back(red);
    exchange.push_back(exch);
    update.push_back(upd);
    memcpy_ms.push_back(mc);
    bare_reduce.push_back(bare);
    fold_other.push_back(other_ms);
    fold_own.push_back(folding);
  }

  std::printf("model: %zu floats (%.1f MB), chunks of %u floats, 2 peers, α = %.2f; ms per node per round, median "
              "of %d\n",
              floats, static_cast<double>(floats) * 4 / 1e6, chunk, static_cast<double>(alpha), repeats);
  const double own = median(snapshot) + median(reduce) + median(update);
  const auto row = [](const char* what, double ms) { std::printf("  %-56s %8.2f\n", what, ms); };
  std::printf("a round with every value copied out first and nothing folded (as under TLS, without folding):\n");
  row("snapshot (fetch_range, chunk by chunk)", median(snapshot));
  row("reduce: our block's contributions in, mean and deltas", median(reduce));
  row("elastic update (chunk by chunk, under the lock)", median(update));
  row("= the passes of a training round", own);
  row("the deltas received (on_reduced: a copy, as a socket's)", median(exchange));
  std::printf("the round as the data plane runs it over TCP with two peers (sent from the model, our block folded):\n");
  row("the other block: the update from the deltas", median(fold_other));
  row("our block: our values, mean, delta, update in one pass", median(fold_own));
  const double folded_total = median(fold_other) + median(fold_own);
  row("= the passes of such a round", folded_total);
  std::printf("for scale:\n");
  row("memcpy of the whole model", median(memcpy_ms));
  row("bare reduce of half the model (a += b, MPI's with 2)", median(bare_reduce));
  row("the passes of a training round less a bare reduce", own - median(bare_reduce));
  row("the passes of such a round less a bare reduce", folded_total - median(bare_reduce));
  return 0;
}
