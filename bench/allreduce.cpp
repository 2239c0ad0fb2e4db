// Allreduce bandwidth of real gridnode processes on loopback (issue 3's figures).
//
// For each P (processes) and S (floats), starts P `gridnode run` processes with a probe model of S floats,
// θ = 1, and one round in flight (so a round's time is its latency, as nccl-tests and Gloo measure it), lets
// rounds run, and reads the rounds done from the cluster's status. With --dims 1 every node is in one line with
// every other, and a round is an allreduce; with --dims 2 the nodes form a grid (4 nodes: 2 × 2) and an allreduce
// is one round in each dimension, so the time of one is the time a node takes per d' rounds (d' the grid's
// effective dimensions, from the status). Prints, per size, that time t, algbw = S·4/t and busbw =
// algbw·2(p−1)/p (nccl-tests' definitions).
//
// The check: the rounds average exactly (θ = 1, α = 0.5), so after the measurement every node's model has
// converged to the same mean; a node whose mean differs (a chunk lost, misplaced or corrupted) fails the run.
//
//   bench_allreduce [--gridnode PATH] [--procs 2,4] [--floats 1024,262144,4194304,16777216] [--seconds 4]
//                   [--rounds-in-flight 1] [--dims 1] [--csv] [--set key=value]... [--tls DIR]
//
// --tls DIR runs every connection between nodes through TLS, with DIR/bench.pem, DIR/bench.key and DIR/ca.pem
// (`scripts/make-certs.sh DIR bench` makes them); the benchmark's own status queries use the same certificate.
//
// --csv prints one line per size: gridtrain,<dims>d,procs,bytes,seconds,algbw,busbw,ok. --set passes a config
// override to every node (allreduce.max_chunk_floats=..., say). --straggle STOP_MS,PERIOD_MS makes one node a
// straggler (SIGSTOP for STOP_MS of every PERIOD_MS; a node that masters no line and does not host the
// GridMaster): the figures are then the other nodes', and the check leaves the straggler out. A note on stderr says
// what share of the measured nodes' rounds completed short of their quorum.
// Rounds are counted from the nodes' reports (every 250 ms), so each size runs for several seconds, timed from one
// change of the count to another. On a
// 2-core machine 4 processes are oversubscribed: small sizes then measure scheduling as much as the transport.

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "actors/credentials.hpp"
#include "actors/runtime.hpp"
#include "app/child_process.hpp"
#include "config/config.hpp"

using namespace gridtrain;
using namespace std::chrono_literals;

namespace {

std::vector<long> parse_list(const char* text) {
  std::vector<long> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stol(item));
  return out;
}

std::string default_gridnode(const char* argv0) {
  // The benchmark lives in build/bench/, the binary in build/.
  auto here = std::filesystem::canonical("/proc/self/exe").parent_path();
  auto candidate = here.parent_path() / "gridnode";
  return std::filesystem::exists(candidate) ? candidate.string() : std::string(argv0);
}

struct Sample {
  double seconds = 0;
  // The rounds every node has done (the fewest of any): it changes as the last node reports a round, so a window
  // between two changes holds whole rounds of every node (a mean over nodes changes with each node's report, and a
  // window from one node's report to another's miscounts by the spread between them).
  double rounds = 0;
  // Summed over the nodes measured: the rounds they completed, and of those the rounds short of their quorum (a
  // chunk averaged over fewer than all peers, or missing).
  double rounds_done = 0, shortfalls = 0;
};

using Clock = std::chrono::steady_clock;

struct Options {
  std::string gridnode;
  std::vector<long> procs{2, 4};
  std::vector<long> sizes{1024, 262144, 4194304, 16777216};
  double seconds = 4;
  long in_flight = 1;
  long dims = 1;
  bool csv = false;
  long straggle_stop_ms = 0, straggle_period_ms = 0;  // 0: no straggler
  std::vector<std::string> overrides;
  std::string tls_dir;  // "" = no TLS
};

// The command line; nullopt after an error line on stderr.
std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  o.gridnode = default_gridnode(argv[0]);
  for (int i = 1; i < argc; i += 2) {
    if (!std::strcmp(argv[i], "--csv")) {
      o.csv = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "error: %s needs a value\n", argv[i]);
      return std::nullopt;
    }
    const char* value = argv[i + 1];
    if (!std::strcmp(argv[i], "--gridnode")) o.gridnode = value;
    else if (!std::strcmp(argv[i], "--dims")) o.dims = std::stol(value);
    else if (!std::strcmp(argv[i], "--set")) o.overrides.push_back(value);
    else if (!std::strcmp(argv[i], "--tls")) o.tls_dir = value;
    else if (!std::strcmp(argv[i], "--straggle")) {
      const auto v = parse_list(value);
      if (v.size() != 2 || v[0] <= 0 || v[1] <= v[0]) {
        std::fprintf(stderr, "error: --straggle wants STOP_MS,PERIOD_MS with 0 < STOP_MS < PERIOD_MS\n");
        return std::nullopt;
      }
      o.straggle_stop_ms = v[0];
      o.straggle_period_ms = v[1];
    }
    else if (!std::strcmp(argv[i], "--procs")) o.procs = parse_list(value);
    else if (!std::strcmp(argv[i], "--floats")) o.sizes = parse_list(value);
    else if (!std::strcmp(argv[i], "--seconds")) o.seconds = std::stod(value);
    else if (!std::strcmp(argv[i], "--rounds-in-flight")) o.in_flight = std::stol(value);
    else {
      std::fprintf(stderr, "error: unknown option %s\n", argv[i]);
      return std::nullopt;
    }
  }
  return o;
}

// What every measurement shares: the options, a runtime and credentials for the status queries, the folder for
// the nodes' config, and the TLS part of that config.
struct Bench {
  const Options& options;
  actors::Runtime& runtime;
  const actors::Credentials& credentials;
  std::filesystem::path dir;
  std::string tls_yaml;
};

// One measurement: P gridnode processes averaging S floats, watched through the first node's grid view.
class Measurement {
 public:
  Measurement(const Bench& bench, long p, long s) : bench_(bench), p_(p), s_(s) {}
  ~Measurement() { stop_straggler(); }
  Measurement(const Measurement&) = delete;
  Measurement& operator=(const Measurement&) = delete;

  // Starts the nodes one after another, the first one the others' seed. False after an error line.
  bool start() {
    const Options& o = bench_.options;
    auto config_path = (bench_.dir / "bench.yaml").string();
    std::ofstream(config_path) << "cluster: {heartbeat_ms: 200, connection_timeout_ms: 5000" << bench_.tls_yaml << "}\n"
                               << "grid: {dims: " << o.dims << ", rounds_in_flight: " << o.in_flight << "}\n"
                               << "allreduce: {elastic_rate: 0.5, quorum: fraction, reduce_threshold: 1, "
                                  "complete_threshold: 1, advance_threshold: 1}\n"
                               << "learner: {kind: probe, probe_floats: " << s_ << "}\n";
    std::string seed;
    for (long i = 0; i < p_; ++i) {
      std::vector<std::string> args{"run", "--config", config_path, "--listen", "127.0.0.1:0"};
      for (const auto& override : o.overrides) args.insert(args.end(), {"--set", override});
      if (!seed.empty()) args.insert(args.end(), {"--seed", seed});
      auto child = app::ChildProcess::start(o.gridnode, args);
      if (!child) {
        std::fprintf(stderr, "error: %s\n", child.error().to_string().c_str());
        return false;
      }
      nodes_.push_back(std::move(child).value());
      auto line = nodes_.back()->wait_for_line("listening on ", 30s);
      if (!line) {
        std::fprintf(stderr, "error: node %ld did not start: %s\n", i, nodes_.back()->output().c_str());
        return false;
      }
      addresses_.push_back(line->substr(line->find("listening on ") + 13));
      if (seed.empty()) seed = addresses_.back();
    }
    seed_ = config::parse_host_port(seed).value();
    return true;
  }

  // The rounds every node has done and the means' spread, from the seed's view (the straggler left out);
  // nullopt while some node is not placed.
  std::optional<Sample> sample() {
    auto view = bench_.runtime.grid_view(seed_, bench_.credentials, 10s);
    if (!view || view.value().nodes.size() != static_cast<std::size_t>(p_)) return std::nullopt;
    double fewest = 1e300, lo = 1e300, hi = -1e300, means = 0, done = 0, shortfalls = 0;
    long counted = 0;
    for (auto& n : view.value().nodes) {
      if (n.place.address == straggler_address_) continue;
      ++counted;
      fewest = std::min(fewest, static_cast<double>(n.figures.rounds_done));
      done += static_cast<double>(n.figures.rounds_done);
      shortfalls += static_cast<double>(n.figures.quorum_shortfalls);
      lo = std::min(lo, n.figures.param_mean);
      hi = std::max(hi, n.figures.param_mean);
      means += n.figures.param_mean;
    }
    // The effective dimensions: those the shape spans (a side of 1 runs no rounds).
    effective_dims_ = static_cast<std::uint32_t>(std::max<long>(
        1, std::count_if(view.value().shape.begin(), view.value().shape.end(), [](auto side) { return side > 1; })));
    mean_spread_ = hi - lo;
    mean_of_means_ = means / static_cast<double>(counted);
    auto now = Clock::now().time_since_epoch();
    return Sample{std::chrono::duration<double>(now).count(), fewest, done, shortfalls};
  }

  // The first sample after `from` whose rounds' count changed, or nullopt at `until`.
  std::optional<Sample> next_change(const Sample& from, Clock::time_point until) {
    while (Clock::now() < until) {
      std::this_thread::sleep_for(100ms);
      auto now = sample();
      if (now && now->rounds > from.rounds) return now;
    }
    return std::nullopt;
  }

  // Makes a straggler of a node with no line to master and no GridMaster, so that what is measured is the line
  // going on without it, not the line waiting for its master. False after an error line.
  bool start_straggler() {
    const Options& o = bench_.options;
    auto view = bench_.runtime.grid_view(seed_, bench_.credentials, 10s);
    std::size_t victim = nodes_.size();
    if (view)
      for (std::size_t i = 0; i < nodes_.size() && victim == nodes_.size(); ++i)
        for (const auto& n : view.value().nodes)
          if (n.place.address == addresses_[i] && n.place.masters.empty() &&
              n.place.node_id != view.value().grid_master_node)
            victim = i;
    if (victim == nodes_.size()) {
      std::fprintf(stderr, "error: no node to make a straggler (each masters a line or the GridMaster)\n");
      return false;
    }
    straggler_address_ = addresses_[victim];
    straggling_ = true;
    straggler_ = std::thread([this, victim, stop = o.straggle_stop_ms, period = o.straggle_period_ms] {
      while (straggling_) {
        nodes_[victim]->signal(SIGSTOP);
        std::this_thread::sleep_for(std::chrono::milliseconds(stop));
        nodes_[victim]->signal(SIGCONT);
        std::this_thread::sleep_for(std::chrono::milliseconds(period - stop));
      }
    });
    return true;
  }

  void stop_straggler() {
    if (!straggler_.joinable()) return;
    straggling_ = false;
    straggler_.join();
  }

  // Says which nodes the cluster lacks (never placed, or gone), with the end of what each printed.
  void report_missing() {
    auto view = bench_.runtime.grid_view(seed_, bench_.credentials, 10s);
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      const bool placed = view && std::any_of(view.value().nodes.begin(), view.value().nodes.end(),
                                              [&](const auto& n) { return n.place.address == addresses_[i]; });
      if (placed) continue;
      const std::string out = nodes_[i]->output();
      std::fprintf(stderr, "note: node %zu (%s) is not in the cluster%s; the end of its output:\n%s\n", i,
                   addresses_[i].c_str(), view ? "" : " (no view from the seed)",
                   out.substr(out.size() > 3000 ? out.size() - 3000 : 0).c_str());
    }
  }

  // Whether the nodes' means agree. Float sums in another order differ in the last bits; a lost or misplaced
  // chunk moves a mean by far more. A node reports its model's mean from a pass that it makes at most every 100
  // passes' time (about 1 s at 64 MB), so while the means still converge (each round halves their spread) the
  // reports of different nodes come from different rounds. The rounds go on: the reports get up to 20 s more to
  // agree, outside the measured time. A defect that keeps the models apart keeps their means apart as well.
  bool means_agree() {
    auto converged = [&] { return mean_spread_ <= 1e-4 * std::max(1.0, std::abs(mean_of_means_)); };
    const auto measured_end = Clock::now();
    const double spread_at_end = mean_spread_;
    while (!converged() && Clock::now() < measured_end + 20s) {
      std::this_thread::sleep_for(250ms);
      sample();
    }
    if (!converged()) {
      std::fprintf(stderr, "error: %ld procs, %ld floats: the nodes' means differ by %g after the rounds\n", p_, s_,
                   mean_spread_);
      return false;
    }
    if (spread_at_end != mean_spread_)
      std::fprintf(stderr, "note: %ld procs, %ld floats: the nodes' reported means, %g apart at the end of the "
                   "measurement, agreed %.1f s later\n", p_, s_, spread_at_end,
                   std::chrono::duration<double>(Clock::now() - measured_end).count());
    return true;
  }

  std::uint32_t effective_dims() const { return effective_dims_; }

 private:
  const Bench& bench_;
  long p_, s_;
  std::vector<std::unique_ptr<app::ChildProcess>> nodes_;
  std::vector<std::string> addresses_;
  config::HostPort seed_;
  std::uint32_t effective_dims_ = 1;
  std::string straggler_address_;            // "" without a straggler
  double mean_spread_ = 0, mean_of_means_ = 0;  // of the nodes' model means, at the last sample
  std::atomic<bool> straggling_{false};
  std::thread straggler_;
};

// The measured window, from one change of the rounds' count to another: a window of fixed length counts a round
// it cuts in two as none, and when rounds take seconds that is most of the figure (rounds of 6.0 s over a 20 s
// window read as 3 rounds, 6.7 s each). Each end is known within a node's report period (250 ms). At least
// `seconds` and 5 rounds; past 10 times `seconds`, whatever changes came, at least 2 where a round takes longer
// (up to 3 minutes).
struct Window {
  std::optional<Sample> first, last;
  bool measured() const { return first && last && last->rounds > first->rounds; }
};

Window measure_window(Measurement& m, double seconds, std::optional<Sample> first) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point soft_deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds * 10));
  const Clock::time_point hard_deadline = std::max(soft_deadline, start + Clock::duration(180s));
  if (first)
    if (auto changed = m.next_change(*first, hard_deadline)) first = changed;
  Window w{first, std::nullopt};
  while (w.first) {
    const double rounds = w.last ? w.last->rounds - w.first->rounds : 0;
    if (w.last && w.last->seconds - w.first->seconds >= seconds && rounds >= 5) break;
    if (Clock::now() >= soft_deadline && rounds >= 2) break;
    auto changed = m.next_change(w.last ? *w.last : *w.first, rounds >= 1 ? soft_deadline : hard_deadline);
    if (!changed) {
      if (Clock::now() >= hard_deadline || rounds >= 1) break;
      continue;
    }
    w.last = changed;
  }
  return w;
}

enum class Outcome { ok, failed, fatal };

// P processes averaging S floats: prints its line (or why there is none).
Outcome measure(const Bench& bench, long p, long s) {
  const Options& o = bench.options;
  Measurement m(bench, p, s);
  if (!m.start()) return Outcome::fatal;
  // Wait until every node is placed and rounds run.
  std::optional<Sample> first;
  for (int tries = 0; tries < 600 && (!first || first->rounds < 2); ++tries) {
    std::this_thread::sleep_for(100ms);
    first = m.sample();
  }
  if (o.straggle_period_ms > 0) {
    if (!m.start_straggler()) return Outcome::fatal;
    std::this_thread::sleep_for(1s);  // into the duty cycle before the first sample
    first = m.sample();
  }
  const Window w = measure_window(m, o.seconds, first);
  m.stop_straggler();
  if (!w.measured()) {
    std::printf("%5ld %12ld  no rounds measured\n", p, s);
    m.report_missing();
    return Outcome::failed;
  }
  const Sample& a = *w.first;
  const Sample& b = *w.last;
  // An allreduce is one round in each effective dimension.
  const double allreduces = (b.rounds - a.rounds) / m.effective_dims();
  const double t = (b.seconds - a.seconds) / allreduces;
  const double bytes = static_cast<double>(s) * 4;
  const double algbw = bytes / t / 1e9;
  const double busbw = algbw * 2.0 * static_cast<double>(p - 1) / static_cast<double>(p);
  if (b.rounds_done > a.rounds_done)
    std::fprintf(stderr, "note: %ld procs, %ld floats: %.1f%% of the measured nodes' rounds short of their "
                 "quorum (%.0f of %.0f)\n", p, s, 100 * (b.shortfalls - a.shortfalls) / (b.rounds_done - a.rounds_done),
                 b.shortfalls - a.shortfalls, b.rounds_done - a.rounds_done);
  const bool ok = m.means_agree();
  if (o.csv)
    std::printf("gridtrain,%ud,%ld,%.0f,%.9f,%.4f,%.4f,%s\n", m.effective_dims(), p, bytes, t, algbw, busbw,
                ok ? "ok" : "FAILED");
  else
    std::printf("%5ld %12ld %12.0f %12.1f %12.3f %12.3f %8.0f %4u%s\n", p, s, bytes, t * 1e6, algbw, busbw,
                b.rounds - a.rounds, m.effective_dims(), ok ? "" : "  FAILED: means differ");
  std::fflush(stdout);
  return ok ? Outcome::ok : Outcome::failed;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Options> options = parse_options(argc, argv);
  if (!options) return 2;
  const Options& o = *options;

  auto dir = std::filesystem::temp_directory_path() / ("gridtrain-bench-allreduce-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  config::Config defaults;
  actors::Runtime runtime{defaults};
  config::ClusterConfig cluster;
  std::string tls_yaml;
  if (!o.tls_dir.empty()) {
    const auto at = std::filesystem::absolute(o.tls_dir);
    cluster.tls_certificate = (at / "bench.pem").string();
    cluster.tls_key = (at / "bench.key").string();
    cluster.tls_ca = (at / "ca.pem").string();
    tls_yaml = ", tls_certificate: " + cluster.tls_certificate + ", tls_key: " + cluster.tls_key +
               ", tls_ca: " + cluster.tls_ca;
  }
  auto credentials = actors::load_credentials(cluster);
  if (!credentials) {
    std::fprintf(stderr, "error: %s\n", credentials.error().to_string().c_str());
    return 2;
  }
  const Bench bench{o, runtime, credentials.value(), dir, tls_yaml};

  if (!o.csv) {
    std::printf("gridtrain allreduce, gridnode processes on loopback, theta = 1, %ld round(s) in flight, "
                "grid.dims %ld%s\n", o.in_flight, o.dims, o.tls_dir.empty() ? "" : ", TLS");
    std::printf("%5s %12s %12s %12s %12s %12s %8s %4s\n", "procs", "floats", "bytes", "time_us", "algbw_GB/s",
                "busbw_GB/s", "rounds", "dims");
  }
  bool all_ok = true;
  for (long p : o.procs)
    for (long s : o.sizes) {
      const Outcome outcome = measure(bench, p, s);
      if (outcome == Outcome::fatal) return 1;
      all_ok = all_ok && outcome == Outcome::ok;
    }
  std::filesystem::remove_all(dir);
  return all_ok ? 0 : 1;
}
