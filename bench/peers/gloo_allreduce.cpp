// Gloo's allreduce of float32 buffers between P processes on one machine over loopback TCP: the comparison peer
// for our own allreduce (bench/allreduce.cpp). One process per rank; rank 0 prints one CSV line per (size,
// algorithm):
//
//   gloo,<algorithm>,<procs>,<bytes>,<seconds_per_iteration>,<algbw_GBps>,<busbw_GBps>,ok
//
// with algbw = bytes/t and busbw = algbw·2(P−1)/P (nccl-tests' definitions, GB = 1e9 bytes).
//
//   bench_gloo_allreduce --rank R --size P --store DIR [--floats 1024,1048576] [--seconds 3]
//                        [--algorithm ring|ring_chunked|halving_doubling|all] [--host 127.0.0.1]
//
// Start P of them (ranks 0..P−1) with the same options and a fresh, empty store folder DIR (a
// gloo::rendezvous::FileStore; it is created if missing); scripts/peers-allreduce.sh does that. --host is the
// address this rank listens on and the others dial: loopback by default; a host's own address where each rank
// runs in a network namespace of its own (bench/wan/run).
//
// Fairness (what makes this a strong baseline rather than a strawman):
//  - Gloo's algorithm classes (AllreduceRing, AllreduceRingChunked, AllreduceHalvingDoubling), constructed once
//    per size and reused, as Gloo intends: no per-iteration setup. Not the newer gloo::allreduce() function,
//    which in Debian's build sets SO_SNDBUF to 52 bytes and stalls.
//  - The TCP pairs stay in Gloo's default async mode (what PyTorch uses). Sync mode (Pair::setSync) is 2-3x
//    faster at 4 KiB here but deadlocks at 64 MB: both ends block in writev once the 4 MiB socket buffers fill.
//  - The data buffer is allocated and touched once (first-touch page faults cost ~10 µs per 4 KiB page here);
//    Gloo's own inbox/outbox are touched by the warm-up iterations.
//  - Warm-up and calibration iterations are untimed; rank 0's calibration decides the iteration count and
//    every rank gets it, so all ranks run the same number of iterations and nobody waits on a straggler's
//    extra rounds.
//  - The allreduce is in place, so each iteration refills the buffer with rank+1; only run() is timed, so the
//    refill (and the check folded into it) is not counted. The time is the mean over ranks of each rank's
//    summed run() time divided by the iterations (nccl-tests' default, and what bench_allreduce reports).
//  - Every iteration's result is checked: each element must be P(P+1)/2. A wrong element prints an error and
//    exits 1. Bad options or Gloo failures (store, connect, timeout) print one error line and exit 2.

#include <gloo/algorithm.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::exit(2);
}

long parse_long(const std::string& text, const char* option) {
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0) fail(std::string(option) + ": not an integer: '" + text + "'");
  return value;
}

std::vector<long> parse_sizes(const std::string& text) {
  std::vector<long> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    long n = parse_long(text.substr(start, comma - start), "--floats");
    // Gloo's algorithms take the count as an int.
    if (n <= 0 || n > INT_MAX) fail("--floats: each size must be in 1.." + std::to_string(INT_MAX));
    out.push_back(n);
    start = comma + 1;
  }
  return out;
}

// Checks the previous iteration's result (every element == expect) and refills with value, in one pass; the
// mismatch count and the store vectorise, so this costs about as much as the refill alone.
std::size_t check_and_refill(float* data, std::size_t n, bool check, float expect, float value,
                             std::size_t* first_bad) {
  std::size_t bad = 0;
  if (check) {
    for (std::size_t i = 0; i < n; ++i) bad += data[i] != expect;
    if (bad > 0)
      for (std::size_t i = 0; i < n; ++i)
        if (data[i] != expect) {
          *first_bad = i;
          break;
        }
  }
  std::fill(data, data + n, value);
  return bad;
}

std::unique_ptr<gloo::Algorithm> make_algorithm(const std::string& name, const std::shared_ptr<gloo::Context>& ctx,
                                                float* data, int count) {
  std::vector<float*> ptrs{data};
  if (name == "ring") return std::make_unique<gloo::AllreduceRing<float>>(ctx, ptrs, count);
  if (name == "ring_chunked") return std::make_unique<gloo::AllreduceRingChunked<float>>(ctx, ptrs, count);
  return std::make_unique<gloo::AllreduceHalvingDoubling<float>>(ctx, ptrs, count);
}

// A tiny allreduce on a fixed two-double buffer, built once: rank 0 broadcasts through it (the others add 0,
// which leaves rank 0's value bit-exact) and the ranks sum their results through it.
class Control {
 public:
  explicit Control(const std::shared_ptr<gloo::Context>& ctx)
      : algorithm_(ctx, std::vector<double*>{values_.data()}, static_cast<int>(values_.size())) {}
  std::vector<double> sum(double a, double b) {
    values_ = {a, b};
    algorithm_.run();
    return values_;
  }

 private:
  std::vector<double> values_ = std::vector<double>(2);
  gloo::AllreduceRing<double> algorithm_;
};

struct Result {
  double seconds_per_iteration = 0;  // mean over ranks
  double wrong = 0;                  // wrong elements, summed over ranks and iterations
};

Result measure(gloo::Algorithm& algorithm, Control& control, float* data, std::size_t n, int rank, int size,
               double seconds) {
  const float value = static_cast<float>(rank + 1);
  const float expect = static_cast<float>(size) * static_cast<float>(size + 1) / 2;
  bool filled = false;
  std::size_t wrong = 0, first_bad = 0;
  auto iteration = [&] {
    wrong += check_and_refill(data, n, filled, expect, value, &first_bad);
    filled = true;
    auto start = Clock::now();
    algorithm.run();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };

  // Warm-up and calibration: rounds of 1, 2, 4, ... iterations until at least 3 have run and a round lasts
  // long enough to time. Rank 0's round time is broadcast, so every rank takes the same decisions.
  const double round_target = std::clamp(seconds / 10, 0.02, 0.25);
  long round = 1, warmed = 0;
  double per_iteration = 0;
  for (;;) {
    double t = 0;
    for (long i = 0; i < round; ++i) t += iteration();
    warmed += round;
    t = control.sum(rank == 0 ? t : 0, 0)[0];
    if (warmed >= 3 && t >= round_target) {
      per_iteration = t / static_cast<double>(round);
      break;
    }
    round *= 2;
  }
  const long iterations = std::max(1L, std::lround(seconds / per_iteration));

  double timed = 0;
  for (long i = 0; i < iterations; ++i) timed += iteration();
  wrong += check_and_refill(data, n, true, expect, value, &first_bad);
  if (wrong > 0)
    std::fprintf(stderr,
                 "error: gloo rank %d, %zu floats: %zu wrong elements over all iterations "
                 "(first at %zu: %g, want %g)\n",
                 rank, n, wrong, first_bad, static_cast<double>(data[first_bad]), static_cast<double>(expect));

  auto totals = control.sum(timed / static_cast<double>(iterations), static_cast<double>(wrong));
  return {totals[0] / size, totals[1]};
}

}  // namespace

int main(int argc, char** argv) {
  long rank = -1, size = -1;
  std::string store_dir, algorithm = "all", host = "127.0.0.1";
  std::vector<long> sizes{1024, 1048576};
  double seconds = 3;
  for (int i = 1; i < argc; i += 2) {
    std::string option = argv[i];
    if (i + 1 >= argc) fail(option + ": missing value");
    std::string value = argv[i + 1];
    if (option == "--rank") rank = parse_long(value, "--rank");
    else if (option == "--size") size = parse_long(value, "--size");
    else if (option == "--store") store_dir = value;
    else if (option == "--floats") sizes = parse_sizes(value);
    else if (option == "--algorithm") algorithm = value;
    else if (option == "--host") {
      if (value.empty()) fail("--host: need an address to listen on");
      host = value;
    }
    else if (option == "--seconds") {
      char* end = nullptr;
      seconds = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(seconds > 0) || !std::isfinite(seconds))
        fail("--seconds: not a positive number: '" + value + "'");
    } else fail("unknown option " + option);
  }
  if (size < 1 || size > 4096) fail("--size: need 1..4096 processes");
  if (rank < 0 || rank >= size) fail("--rank: need 0..size-1");
  if (store_dir.empty()) fail("--store DIR is required");
  std::vector<std::string> algorithms;
  if (algorithm == "all") algorithms = {"ring", "ring_chunked", "halving_doubling"};
  else if (algorithm == "ring" || algorithm == "ring_chunked" || algorithm == "halving_doubling")
    algorithms = {algorithm};
  else fail("--algorithm: need ring, ring_chunked, halving_doubling or all, not '" + algorithm + "'");

  try {
    std::error_code ec;
    std::filesystem::create_directories(store_dir, ec);  // FileStore needs the folder to exist
    gloo::rendezvous::FileStore store(store_dir);
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(static_cast<int>(rank), static_cast<int>(size));
    context->connectFullMesh(store, device);
    Control control(context);

    // One buffer for every size, allocated and touched once (value-initialised) so no page faults are timed.
    std::vector<float> buffer(static_cast<std::size_t>(*std::max_element(sizes.begin(), sizes.end())));
    for (long n : sizes) {
      for (const auto& name : algorithms) {
        auto algo = make_algorithm(name, context, buffer.data(), static_cast<int>(n));
        Result r = measure(*algo, control, buffer.data(), static_cast<std::size_t>(n), static_cast<int>(rank),
                           static_cast<int>(size), seconds);
        if (r.wrong > 0) {
          if (rank == 0)
            std::fprintf(stderr, "error: gloo %s, %ld processes, %ld floats: sum check failed on some rank\n",
                         name.c_str(), size, n);
          return 1;
        }
        if (rank == 0) {
          double bytes = static_cast<double>(n) * sizeof(float);
          double algbw = bytes / r.seconds_per_iteration / 1e9;
          double busbw = algbw * 2.0 * static_cast<double>(size - 1) / static_cast<double>(size);
          std::printf("gloo,%s,%ld,%.0f,%.6e,%.4f,%.4f,ok\n", name.c_str(), size, bytes, r.seconds_per_iteration,
                      algbw, busbw);
          std::fflush(stdout);
        }
      }
    }
  } catch (const std::exception& e) {
    // Gloo's messages can span lines; keep the one-line contract.
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    fail("gloo rank " + std::to_string(rank) + ": " + message);
  }
  return 0;
}
