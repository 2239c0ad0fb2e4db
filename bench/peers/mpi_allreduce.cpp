// OpenMPI's MPI_Allreduce of float32 buffers between P processes on one machine: the comparison peer for our
// own allreduce (bench/allreduce.cpp). Rank 0 prints one CSV line per size:
//
//   mpi,<label>,<procs>,<bytes>,<seconds_per_iteration>,<algbw_GBps>,<busbw_GBps>,ok
//
// with algbw = bytes/t and busbw = algbw·2(P−1)/P (nccl-tests' definitions, GB = 1e9 bytes).
//
//   mpirun -np P [--mca btl tcp,self | --mca btl vader,self] bench_mpi_allreduce
//          [--floats 1024,1048576] [--seconds 3] [--label tcp|shm] [--elastic-rate A [--round-chunk-floats K]]
//
// --elastic-rate A times what a training node's averaging round is, done with MPI (the same job a gridtrain round
// does): the snapshot of the live model m into a send buffer s, MPI_Allreduce(s -> r), and the elastic update
// m <- m + A·(r/P - s). Not in place: the update needs our own contribution s after the sum has come. Without it,
// only a bare in-place MPI_Allreduce of one buffer is timed. --round-chunk-floats K runs the round K floats at a
// time (snapshot, allreduce and update of one piece while it is in the cache, then the next): fewer passes through
// memory, at the cost of one allreduce's latency per piece. 0 (the default): the whole model at once.
//
// The caller picks the transport with mpirun's --mca btl and names it with --label (the program cannot tell);
// scripts/peers-allreduce.sh runs both, pinned to loopback for TCP.
//
// Fairness (what makes this a strong baseline rather than a strawman):
//  - MPI_Allreduce(MPI_IN_PLACE, ...) on one buffer allocated and touched once (first-touch page faults cost
//    ~10 µs per 4 KiB page here). OpenMPI allocates temporaries inside each large allreduce, so run it with
//    GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4000000000 (the script does), or the
//    large sizes measure page faults rather than the transport.
//  - Warm-up and calibration iterations are untimed; rank 0's calibration decides the iteration count and
//    MPI_Bcast gives it to every rank, so all ranks run the same number of iterations.
//  - The allreduce is in place, so each iteration refills the buffer with rank+1; only the MPI_Allreduce call is
//    timed, so the refill (and the check folded into it) is not counted. The time is the mean over ranks of each
//    rank's summed call time divided by the iterations (nccl-tests' default, and what bench_allreduce reports).
//  - Every iteration's result is checked: each element must be P(P+1)/2. A wrong element prints an error and
//    exits 1. Bad options print one error line and exit 2.

#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

long parse_long(const std::string& text, const char* option) {
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0)
    throw UsageError(std::string(option) + ": not an integer: '" + text + "'");
  return value;
}

std::vector<long> parse_sizes(const std::string& text) {
  std::vector<long> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    long n = parse_long(text.substr(start, comma - start), "--floats");
    // MPI counts are ints.
    if (n <= 0 || n > INT_MAX) throw UsageError("--floats: each size must be in 1.." + std::to_string(INT_MAX));
    out.push_back(n);
    start = comma + 1;
  }
  return out;
}

struct Options {
  std::vector<long> sizes{1024, 1048576};
  double seconds = 3;
  std::string label = "tcp";
  float elastic_rate = 0;  // > 0: time a whole averaging round (snapshot, allreduce, elastic update)
  long round_chunk = 0;    // with elastic_rate: floats per piece of the round; 0 = all at once
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    std::string option = argv[i];
    if (i + 1 >= argc) throw UsageError(option + ": missing value");
    std::string value = argv[i + 1];
    if (option == "--floats") o.sizes = parse_sizes(value);
    else if (option == "--label") o.label = value;
    else if (option == "--round-chunk-floats") {
      o.round_chunk = parse_long(value, "--round-chunk-floats");
      if (o.round_chunk < 0 || o.round_chunk > INT_MAX)
        throw UsageError("--round-chunk-floats: need 0.." + std::to_string(INT_MAX));
    } else if (option == "--elastic-rate") {
      char* end = nullptr;
      o.elastic_rate = std::strtof(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(o.elastic_rate > 0 && o.elastic_rate <= 1))
        throw UsageError("--elastic-rate: need a number in (0, 1]: '" + value + "'");
    }
    else if (option == "--seconds") {
      char* end = nullptr;
      o.seconds = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(o.seconds > 0) || !std::isfinite(o.seconds))
        throw UsageError("--seconds: not a positive number: '" + value + "'");
    } else throw UsageError("unknown option " + option);
  }
  if (o.round_chunk > 0 && o.elastic_rate == 0) throw UsageError("--round-chunk-floats needs --elastic-rate");
  // The label goes into a CSV field.
  if (o.label.empty() || o.label.find_first_of(",\n") != std::string::npos)
    throw UsageError("--label: need a non-empty name without commas");
  return o;
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

struct Result {
  double seconds_per_iteration = 0;  // mean over ranks
  double wrong = 0;                  // wrong elements, summed over ranks and iterations
};

// The buffers of one process, allocated and touched once for the largest size.
struct Buffers {
  std::vector<float> model;     // the live model m (the bare allreduce's one buffer)
  std::vector<float> snapshot;  // s, with --elastic-rate
  std::vector<float> sum;       // r, with --elastic-rate
};

Result measure(Buffers& b, int n, int rank, int size, double seconds, float alpha, int chunk) {
  float* data = b.model.data();
  const float value = static_cast<float>(rank + 1);
  const float total = static_cast<float>(size) * static_cast<float>(size + 1) / 2;
  // Exact in float for the small P and the A of the benchmarks: halves and quarters of small integers.
  const float expect = alpha > 0 ? value + alpha * (total / static_cast<float>(size) - value) : total;
  bool filled = false;
  std::size_t wrong = 0, first_bad = 0;
  auto iteration = [&] {
    wrong += check_and_refill(data, static_cast<std::size_t>(n), filled, expect, value, &first_bad);
    filled = true;
    auto start = Clock::now();
    if (alpha > 0) {
      const float inv = 1.0f / static_cast<float>(size);
      const int step = chunk > 0 ? chunk : n;
      for (int begin = 0; begin < n; begin += step) {
        const int len = std::min(step, n - begin);
        float* m = data + begin;
        float* s = b.snapshot.data() + begin;
        float* r = b.sum.data() + begin;
        std::copy(m, m + len, s);
        MPI_Allreduce(s, r, len, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < len; ++i) m[i] += alpha * (r[i] * inv - s[i]);
      }
    } else {
      MPI_Allreduce(MPI_IN_PLACE, data, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
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
    MPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (warmed >= 3 && t >= round_target) {
      per_iteration = t / static_cast<double>(round);
      break;
    }
    round *= 2;
  }
  long iterations = std::max(1L, std::lround(seconds / per_iteration));
  MPI_Bcast(&iterations, 1, MPI_LONG, 0, MPI_COMM_WORLD);  // already equal; rank 0's word is the rule

  double timed = 0;
  for (long i = 0; i < iterations; ++i) timed += iteration();
  wrong += check_and_refill(data, static_cast<std::size_t>(n), true, expect, value, &first_bad);
  if (wrong > 0)
    std::fprintf(stderr,
                 "error: mpi rank %d, %d floats: %zu wrong elements over all iterations "
                 "(first at %zu: %g, want %g)\n",
                 rank, n, wrong, first_bad, static_cast<double>(data[first_bad]), static_cast<double>(expect));

  double totals[2] = {timed / static_cast<double>(iterations), static_cast<double>(wrong)};
  MPI_Allreduce(MPI_IN_PLACE, totals, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return {totals[0] / size, totals[1]};
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  Options options;
  try {
    options = parse(argc, argv);
  } catch (const std::exception& e) {
    // Every rank sees the same arguments and fails alike; one line is enough.
    if (rank == 0) std::fprintf(stderr, "error: %s\n", e.what());
    MPI_Finalize();
    return 2;
  }

  // One set of buffers for every size, allocated and touched once (value-initialised) so no page faults are timed.
  const auto largest = static_cast<std::size_t>(*std::max_element(options.sizes.begin(), options.sizes.end()));
  Buffers buffers;
  buffers.model.resize(largest);
  if (options.elastic_rate > 0) {
    buffers.snapshot.resize(largest);
    buffers.sum.resize(largest);
  }
  int status = 0;
  for (long n : options.sizes) {
    Result r = measure(buffers, static_cast<int>(n), rank, size, options.seconds, options.elastic_rate,
                       static_cast<int>(options.round_chunk));
    if (r.wrong > 0) {
      if (rank == 0)
        std::fprintf(stderr, "error: mpi %s, %d processes, %ld floats: sum check failed on some rank\n",
                     options.label.c_str(), size, n);
      status = 1;
      break;
    }
    if (rank == 0) {
      double bytes = static_cast<double>(n) * sizeof(float);
      double algbw = bytes / r.seconds_per_iteration / 1e9;
      double busbw = algbw * 2.0 * static_cast<double>(size - 1) / static_cast<double>(size);
      std::printf("mpi,%s,%d,%.0f,%.6e,%.4f,%.4f,ok\n", options.label.c_str(), size, bytes, r.seconds_per_iteration,
                  algbw, busbw);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return status;
}
