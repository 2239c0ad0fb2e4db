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

struct Options {
  std::size_t floats = 16777216;
  std::uint32_t chunk = 262144;
  int repeats = 5;
};

// The command line; exits 2 with the usage on what it cannot take.
Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 < argc && a == "--floats") {
      o.floats = static_cast<std::size_t>(parse_positive("--floats", argv[++i]));
    } else if (i + 1 < argc && a == "--chunk") {
      o.chunk = static_cast<std::uint32_t>(parse_positive("--chunk", argv[++i]));
    } else if (i + 1 < argc && a == "--repeats") {
      o.repeats = static_cast<int>(parse_positive("--repeats", argv[++i]));
    } else {
      std::fprintf(stderr, "usage: bench_round_passes [--floats N] [--chunk C] [--repeats R]\n");
      std::exit(2);
    }
  }
  return o;
}

// What one repeat measured, ms for peer 0.
struct Times {
  double snapshot = 0, reduce = 0, exchange = 0, update = 0;  // the round with every value copied out first
  double fold_other = 0, fold_own = 0;                         // the round as the data plane runs it over TCP
  double memcpy = 0, bare_reduce = 0;                          // for scale
};

// Two peers' rounds over their stores, and the buffers the passes for scale use.
class TwoPeers {
 public:
  explicit TwoPeers(const Options& o)
      : floats_(o.floats),
        model_{{"w", {static_cast<int>(o.floats)}}},
        store0_(model_),
        store1_(model_),
        copy_to_(o.floats),
        reduce_a_(o.floats / 2),
        reduce_b_(o.floats / 2) {
    config_.quorum = allreduce::QuorumMode::fraction;
    config_.reduce_threshold = config_.complete_threshold = 1.0;
    config_.max_chunk_floats = o.chunk;
    alpha_ = static_cast<float>(config_.elastic_rate);
    std::fill(reduce_a_.begin(), reduce_a_.end(), 1.0f);
    std::fill(reduce_b_.begin(), reduce_b_.end(), 2.0f);
  }

  // The rounds, over stores of distinct values. False after an error line.
  bool start() {
    rounds_.reserve(2);
    for (std::uint32_t p = 0; p < 2; ++p) {
      stores_[p]->update_each([&](std::size_t, std::span<float> v) {
        for (std::size_t t = 0; t < v.size(); ++t) v[t] = static_cast<float>((t + p) % 1000) * 1e-3f;
      });
      auto round = allreduce::Round::create({1, 1, 0, 0, 0}, floats_, 2, p, config_);
      if (!round) {
        std::fprintf(stderr, "bench_round_passes: %s\n", round.error().message.c_str());
        return false;
      }
      rounds_.push_back(std::move(round).value());
    }
    return true;
  }

  float alpha() const { return alpha_; }

  // One repeat of everything; false after an error line (a round that did not complete).
  bool repeat(int rep, Times& times) {
    return copied_round(rep, times) && folded_round(rep, times) && (scale(times), true);
  }

 private:
  // Every value copied out first (fetch_range), peer 1's chunks reduced, the deltas exchanged, the update.
  bool copied_round(int rep, Times& times) {
    const allreduce::Partition& part = rounds_[0].partition();
    for (std::uint32_t p = 0; p < 2; ++p) rounds_[p].reset({1, 1, 0, 0, static_cast<std::uint64_t>(rep)});
    auto t = Clock::now();
    for (std::uint32_t c = 0; c < part.chunk_count(); ++c) {
      const allreduce::Range r = part.chunk(c);
      stores_[0]->fetch_range(r.offset, rounds_[0].send_buffer().subspan(r.offset, r.length));
    }
    times.snapshot = ms_since(t);
    stores_[1]->fetch(rounds_[1].send_buffer());
    for (std::uint32_t p = 0; p < 2; ++p) {
      const auto sends = rounds_[p].scatter();
      to_peer_[p].assign(sends.begin(), sends.end());
    }
    // Peer 0 reduces its block from peer 1's chunks; the means it sends are what peer 1 receives.
    std::vector<allreduce::Send> means[2];
    t = Clock::now();
    for (const auto& s : to_peer_[1]) {
      const auto out = rounds_[0].on_scatter({rounds_[0].key(), 1, s.offset, s.data});
      means[0].insert(means[0].end(), out.sends.begin(), out.sends.end());
    }
    times.reduce = ms_since(t);
    for (const auto& s : to_peer_[0]) {
      const auto out = rounds_[1].on_scatter({rounds_[1].key(), 0, s.offset, s.data});
      means[1].insert(means[1].end(), out.sends.begin(), out.sends.end());
    }
    t = Clock::now();
    for (const auto& s : means[1])
      rounds_[0].on_reduced({rounds_[0].key(), 1, s.offset, s.count, s.data, s.kind == allreduce::SendKind::delta});
    times.exchange = ms_since(t);
    if (!rounds_[0].complete()) {
      std::fprintf(stderr, "bench_round_passes: the round did not complete\n");
      return false;
    }
    t = Clock::now();
    for (std::uint32_t c = 0; c < part.chunk_count(); ++c) {
      const allreduce::Range r = part.chunk(c);
      stores_[0]->update_range(r.offset, r.offset + r.length, [&](std::size_t offset, std::span<float> values) {
        allreduce::elastic_update(values, offset, rounds_[0], alpha_);
      });
    }
    times.update = ms_since(t);
    return true;
  }

  // The round as the data plane runs it over TCP with two peers: our values for peer 1's block go out straight
  // from the store (nothing copied), peer 1's chunks of our block land (the socket's copy, not timed) and fold,
  // and peer 1's deltas update the other block. REQUIRES: copied_round() of the same repeat (to_peer_).
  bool folded_round(int rep, Times& times) {
    const allreduce::Partition& part = rounds_[0].partition();
    for (std::uint32_t p = 0; p < 2; ++p) rounds_[p].reset({1, 1, 0, 0, static_cast<std::uint64_t>(rep) + 1000});
    const allreduce::Range other = part.block(1);
    stores_[1]->fetch(rounds_[1].send_buffer());
    const auto direct = rounds_[0].scatter(stores_[0]->arena());
    std::vector<allreduce::Send> from_model(direct.begin(), direct.end());
    rounds_[1].scatter();  // its chunks for peer 0 are to_peer_[1]'s: the same offsets, now from this round's buffer
    for (const auto& s : to_peer_[1]) {
      const auto landing = rounds_[0].contribution_target(rounds_[0].key(), 1, s.offset, s.data.size());
      std::copy(s.data.begin(), s.data.end(), landing.into.begin());
    }
    auto t = Clock::now();
    for (const auto& s : to_peer_[1]) {
      const auto target = rounds_[0].fold_target(part.chunk_containing(s.offset), 1);
      if (!target) {
        std::fprintf(stderr, "bench_round_passes: a chunk of our block did not fold\n");
        return false;
      }
      stores_[0]->update_range(s.offset, s.offset + s.data.size(), [&](std::size_t offset, std::span<float> values) {
        allreduce::fold_chunk(values, *target, offset - s.offset, alpha_);
      });
      rounds_[0].folded(*target);
    }
    times.fold_own = ms_since(t);
    for (const auto& s : from_model) {
      const auto out = rounds_[1].on_scatter({rounds_[1].key(), 0, s.offset, s.data});
      for (const auto& d : out.sends)
        rounds_[0].on_reduced({rounds_[0].key(), 1, d.offset, d.count, d.data, d.kind == allreduce::SendKind::delta});
    }
    if (!rounds_[0].complete()) {
      std::fprintf(stderr, "bench_round_passes: the folded round did not complete\n");
      return false;
    }
    t = Clock::now();
    stores_[0]->update_range(other.offset, other.offset + other.length, [&](std::size_t offset, std::span<float> v) {
      allreduce::elastic_update(v, offset, rounds_[0], alpha_);
    });
    times.fold_other = ms_since(t);
    return true;
  }

  // The passes any allreduce makes or needs: a copy of the model, a bare reduce of half of it.
  void scale(Times& times) {
    auto t = Clock::now();
    stores_[0]->fetch(std::span<float>(copy_to_));
    times.memcpy = ms_since(t);
    t = Clock::now();
    add_run(reduce_a_.size(), reduce_a_.data(), reduce_b_.data());
    times.bare_reduce = ms_since(t);
  }

  std::size_t floats_;
  allreduce::RoundConfig config_;
  float alpha_ = 0;
  std::vector<learner::TensorSpec> model_;
  learner::ParameterStore store0_, store1_;
  learner::ParameterStore* stores_[2] = {&store0_, &store1_};
  std::vector<allreduce::Round> rounds_;
  std::vector<allreduce::Send> to_peer_[2];  // each peer's chunks of the other's block, from copied_round()
  LargeBuffer<float> copy_to_, reduce_a_, reduce_b_;
};

void report(const Options& o, float alpha, const std::vector<Times>& all) {
  auto med = [&](double Times::*field) {
    std::vector<double> v;
    for (const Times& t : all) v.push_back(t.*field);
    return median(v);
  };
  std::printf("model: %zu floats (%.1f MB), chunks of %u floats, 2 peers, α = %.2f; ms per node per round, median "
              "of %d\n",
              o.floats, static_cast<double>(o.floats) * 4 / 1e6, o.chunk, static_cast<double>(alpha), o.repeats);
  const double own = med(&Times::snapshot) + med(&Times::reduce) + med(&Times::update);
  const auto row = [](const char* what, double ms) { std::printf("  %-56s %8.2f\n", what, ms); };
  std::printf("a round with every value copied out first and nothing folded (as under TLS, without folding):\n");
  row("snapshot (fetch_range, chunk by chunk)", med(&Times::snapshot));
  row("reduce: our block's contributions in, mean and deltas", med(&Times::reduce));
  row("elastic update (chunk by chunk, under the lock)", med(&Times::update));
  row("= the passes of a training round", own);
  row("the deltas received (on_reduced: a copy, as a socket's)", med(&Times::exchange));
  std::printf("the round as the data plane runs it over TCP with two peers (sent from the model, our block folded):\n");
  row("the other block: the update from the deltas", med(&Times::fold_other));
  row("our block: our values, mean, delta, update in one pass", med(&Times::fold_own));
  const double folded_total = med(&Times::fold_other) + med(&Times::fold_own);
  row("= the passes of such a round", folded_total);
  std::printf("for scale:\n");
  row("memcpy of the whole model", med(&Times::memcpy));
  row("bare reduce of half the model (a += b, MPI's with 2)", med(&Times::bare_reduce));
  row("the passes of a training round less a bare reduce", own - med(&Times::bare_reduce));
  row("the passes of such a round less a bare reduce", folded_total - med(&Times::bare_reduce));
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  TwoPeers peers(o);
  if (!peers.start()) return 2;
  std::vector<Times> all;
  for (int rep = 0; rep < o.repeats + 1; ++rep) {  // the first repeat touches every page: not counted
    Times times;
    if (!peers.repeat(rep, times)) return 1;
    if (rep > 0) all.push_back(times);
  }
  report(o, peers.alpha(), all);
  return 0;
}
