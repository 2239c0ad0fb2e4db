// Allreduce bandwidth of real gridnode processes on loopback (issue 3's figures).
//
// For each P (processes) and S (floats), starts P `gridnode run` processes with a probe model of S floats in
// one line (grid.dims 1: every node averages with every other), θ = 1, and one round in flight (so a round's
// time is its latency, as nccl-tests and Gloo measure it), lets rounds run, and reads the rounds done from the
// cluster's status. Prints, per size, the time per round t, algbw = S·4/t and busbw = algbw·2(p−1)/p
// (nccl-tests' definitions).
//
//   bench_allreduce [--gridnode PATH] [--procs 2,4] [--floats 1024,262144,4194304,16777216] [--seconds 4]
//                   [--rounds-in-flight 1]
//
// Rounds are counted from the nodes' reports (every 250 ms), so each size runs for several seconds. On a
// 2-core machine 4 processes are oversubscribed: small sizes then measure scheduling as much as the transport.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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
  double rounds = 0;  // mean over nodes
};

}  // namespace

int main(int argc, char** argv) {
  std::string gridnode = default_gridnode(argv[0]);
  std::vector<long> procs{2, 4};
  std::vector<long> sizes{1024, 262144, 4194304, 16777216};
  double seconds = 4;
  long in_flight = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--gridnode")) gridnode = argv[i + 1];
    else if (!std::strcmp(argv[i], "--procs")) procs = parse_list(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--floats")) sizes = parse_list(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seconds")) seconds = std::stod(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds-in-flight")) in_flight = std::stol(argv[i + 1]);
    else {
      std::fprintf(stderr, "error: unknown option %s\n", argv[i]);
      return 2;
    }
  }

  auto dir = std::filesystem::temp_directory_path() / ("gridtrain-bench-allreduce-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  config::Config defaults;
  actors::Runtime runtime{defaults};

  std::printf("gridtrain allreduce, gridnode processes on loopback, theta = 1, %ld round(s) in flight\n", in_flight);
  std::printf("%5s %12s %12s %12s %12s %12s %8s\n", "procs", "floats", "bytes", "time_us", "algbw_GB/s",
              "busbw_GB/s", "rounds");
  for (long p : procs) {
    for (long s : sizes) {
      auto config_path = (dir / "bench.yaml").string();
      std::ofstream(config_path) << "cluster: {heartbeat_ms: 200, connection_timeout_ms: 5000}\n"
                                 << "grid: {dims: 1, rounds_in_flight: " << in_flight << "}\n"
                                 << "allreduce: {elastic_rate: 0.5, quorum: fraction, reduce_threshold: 1, "
                                    "complete_threshold: 1, advance_threshold: 1}\n"
                                 << "learner: {kind: probe, probe_floats: " << s << "}\n";
      std::vector<std::unique_ptr<app::ChildProcess>> nodes;
      std::string seed;
      bool started = true;
      for (long i = 0; i < p && started; ++i) {
        std::vector<std::string> args{"run", "--config", config_path, "--listen", "127.0.0.1:0"};
        if (!seed.empty()) args.insert(args.end(), {"--seed", seed});
        auto child = app::ChildProcess::start(gridnode, args);
        if (!child) {
          std::fprintf(stderr, "error: %s\n", child.error().to_string().c_str());
          return 1;
        }
        nodes.push_back(std::move(child).value());
        auto line = nodes.back()->wait_for_line("listening on ", 30s);
        if (!line) {
          std::fprintf(stderr, "error: node %ld did not start: %s\n", i, nodes.back()->output().c_str());
          started = false;
        } else if (seed.empty()) {
          seed = line->substr(line->find("listening on ") + 13);
        }
      }
      if (!started) return 1;
      auto seed_endpoint = config::parse_endpoint(seed).value();
      auto sample = [&]() -> std::optional<Sample> {
        auto view = runtime.grid_view(seed_endpoint, 10s);
        if (!view || view.value().nodes.size() != static_cast<std::size_t>(p)) return std::nullopt;
        double sum = 0;
        for (auto& n : view.value().nodes) sum += static_cast<double>(n.figures.rounds_done);
        auto now = std::chrono::steady_clock::now().time_since_epoch();
        return Sample{std::chrono::duration<double>(now).count(), sum / static_cast<double>(p)};
      };
      // Wait until every node is placed and rounds run, then measure over `seconds` (at least 5 rounds).
      std::optional<Sample> first;
      for (int tries = 0; tries < 600 && (!first || first->rounds < 2); ++tries) {
        std::this_thread::sleep_for(100ms);
        first = sample();
      }
      std::optional<Sample> last;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds * 10);
      while (std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(250ms);
        last = sample();
        if (last && first && last->seconds - first->seconds >= seconds && last->rounds - first->rounds >= 5) break;
      }
      if (!first || !last || last->rounds <= first->rounds) {
        std::printf("%5ld %12ld  no rounds measured\n", p, s);
        continue;
      }
      double t = (last->seconds - first->seconds) / (last->rounds - first->rounds);
      double bytes = static_cast<double>(s) * 4;
      double algbw = bytes / t / 1e9;
      double busbw = algbw * 2.0 * static_cast<double>(p - 1) / static_cast<double>(p);
      std::printf("%5ld %12ld %12.0f %12.1f %12.3f %12.3f %8.0f\n", p, s, bytes, t * 1e6, algbw, busbw,
                  last->rounds - first->rounds);
      std::fflush(stdout);
    }
  }
  std::filesystem::remove_all(dir);
  return 0;
}
