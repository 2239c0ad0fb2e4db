// The control plane at scale: N in-process Nodes with tiny probe models in one actor system, the same actors and
// messages as nodes in separate processes (only the transports are in-process). For one (N, d):
//   form    the first node bootstraps, the other N-1 join at once through it; time until every one is welcomed
//   rounds  rounds per second over --seconds, summed over the nodes (from their reports)
//   join    --ops more nodes join one after another: wall time from start to welcome, and what the GridMaster
//           counted (MembershipFigures): the control messages each join sent (median and max) and its handling
//           time without building the state (median)
//   leave   --ops random members (not the GridMaster's node) leave one after another: the same figures
//   state   the time to build one GridState message (it holds every member), states built per change over the
//           whole run, and GridStates sent with report answers per second, in all and per node
// and prints one row, with d·N^(1/d) beside the messages per change for reference. bench/control_plane_scale runs
// it over sizes and dimensions. The process ends without tearing the cluster down (N leaves would only measure
// the teardown).
//
//   bench_control_plane --nodes N --dims D [--ops K] [--seconds S] [--report-ms R] [--floats F] [--set key=value]...
//                       [--header]
// (defaults: 20 ops, 5 s of rounds, reports every 250 ms as gridnode sends them, probe models of 16 floats)

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <spdlog/spdlog.h>

#include "actors/runtime.hpp"
#include "bench/median.hpp"
#include "config/config.hpp"

using namespace gridtrain;
using bench::median;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "error: %s\n", why.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

long rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

actors::GridView view_of(const actors::NodeHandle& node) {
  auto view = node.grid_view(std::chrono::seconds(60));
  if (!view) fail("no grid view: " + view.error().to_string());
  return std::move(view.value());
}

std::uint64_t rounds_of(const actors::GridView& view) {
  std::uint64_t sum = 0;
  for (const auto& n : view.nodes) sum += n.figures.rounds_done;
  return sum;
}

struct Options {
  int nodes = 256, dims = 2, ops = 20;
  double seconds = 5;
  int report_ms = 250;
  int floats = 16;
  bool header = false;
  std::vector<std::string> sets;  // config overrides, as gridnode's --set takes them
};

// The command line; exits 2 with the usage, or fails, on what it cannot take.
Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* name) { return !std::strcmp(argv[i], name) && i + 1 < argc; };
    if (arg("--nodes")) o.nodes = std::atoi(argv[++i]);
    else if (arg("--dims")) o.dims = std::atoi(argv[++i]);
    else if (arg("--ops")) o.ops = std::atoi(argv[++i]);
    else if (arg("--seconds")) o.seconds = std::atof(argv[++i]);
    else if (arg("--report-ms")) o.report_ms = std::atoi(argv[++i]);
    else if (arg("--floats")) o.floats = std::atoi(argv[++i]);
    else if (arg("--set")) o.sets.emplace_back(argv[++i]);
    else if (!std::strcmp(argv[i], "--header")) o.header = true;
    else {
      std::fprintf(stderr, "usage: bench_control_plane --nodes N --dims D [--ops K] [--seconds S] [--report-ms R] "
                           "[--floats F] [--set key=value]... [--header]\n");
      std::exit(2);
    }
  }
  if (o.nodes < 2 || o.dims < 1 || o.ops < 1 || o.ops >= o.nodes || o.seconds <= 0 || o.report_ms < 10)
    fail("need --nodes >= 2, --dims >= 1, 1 <= --ops < nodes, --seconds > 0, --report-ms >= 10");
  return o;
}

void print_header() {
  std::printf("%6s %2s %-10s %7s %8s %9s | %8s %5s %5s %7s | %8s %5s %5s %7s | %7s | %8s %6s %7s %6s\n", "nodes", "d",
              "shape", "form_s", "rss_MiB", "rounds/s", "join_ms", "msgs", "max", "gm_us", "leave_ms", "msgs", "max",
              "gm_us", "d*n^1/d", "build_us", "b/chg", "state/s", "/node");
}

// One join or leave, as the GridMaster counted it.
struct Op {
  double wall_ms, messages, gm_us, builds;
};

Op op_figures(const actors::MembershipFigures& a, const actors::MembershipFigures& b, bool join, double ms) {
  return Op{ms, static_cast<double>(join ? b.join_messages - a.join_messages : b.leave_messages - a.leave_messages),
            static_cast<double>(join ? b.join_ns - a.join_ns : b.leave_ns - a.leave_ns) / 1e3,
            static_cast<double>(b.state_builds - a.state_builds)};
}

// In-process nodes of one runtime, the first one the others' seed and the GridMaster's host.
class Cluster {
 public:
  Cluster(const Options& o, const config::Config& cfg) : o_(o), cfg_(cfg), runtime_(cfg) {}

  // Everyone at once through the first node; returns the seconds it took.
  double form() {
    const auto t = Clock::now();
    handles_.push_back(start(1, caf::actor{}));
    welcomed(handles_[0]);
    seed_ = handles_[0].actor();
    for (int i = 2; i <= o_.nodes; ++i) handles_.push_back(start(static_cast<std::uint64_t>(i), seed_));
    for (const auto& h : handles_) welcomed(h);
    const double seconds = seconds_since(t);
    const actors::GridView view = view_of(handles_[0]);
    if (view.nodes.size() != static_cast<std::size_t>(o_.nodes))
      fail("formed with " + std::to_string(view.nodes.size()) + " members, not " + std::to_string(o_.nodes));
    for (auto side : view.shape) shape_ += (shape_.empty() ? "" : "x") + std::to_string(side);
    last_ = view.membership;
    return seconds;
  }
  const std::string& shape() const { return shape_; }
  const actors::MembershipFigures& membership() const { return last_; }

  // Rounds a second over --seconds, once every node has reported twice.
  double rounds_per_second() {
    std::this_thread::sleep_for(std::chrono::milliseconds(3 * o_.report_ms));
    actors::GridView view = view_of(handles_[0]);
    const std::uint64_t before = rounds_of(view);
    const auto t = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(o_.seconds));
    view = view_of(handles_[0]);
    const double per_s = static_cast<double>(rounds_of(view) - before) / seconds_since(t);
    if (per_s <= 0) {
      std::size_t reported = 0, with_rounds = 0;
      for (const auto& n : view.nodes) {
        reported += n.param_distance >= 0;
        with_rounds += n.figures.rounds_done > 0;
      }
      fail("no rounds ran in " + std::to_string(o_.seconds) + " s: " + std::to_string(reported) + " of " +
           std::to_string(view.nodes.size()) + " nodes reported, " + std::to_string(with_rounds) +
           " with rounds; layout version " + std::to_string(view.layout_version));
    }
    last_ = view.membership;
    return per_s;
  }

  // --ops joins, one after another, with the GridMaster's figures after each.
  std::vector<Op> joins() {
    std::vector<Op> ops;
    for (int k = 0; k < o_.ops; ++k) {
      const auto t = Clock::now();
      handles_.push_back(start(static_cast<std::uint64_t>(o_.nodes + 1 + k), seed_));
      welcomed(handles_.back());
      ops.push_back(counted(true, 1e3 * seconds_since(t)));
    }
    return ops;
  }

  // --ops leaves of random members other than the GridMaster's node (node 1), one after another.
  std::vector<Op> leaves() {
    std::vector<Op> ops;
    std::mt19937_64 rng{7};
    std::vector<std::size_t> order(handles_.size() - 1);
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i + 1;
    std::shuffle(order.begin(), order.end(), rng);
    for (int k = 0; k < o_.ops; ++k) {
      const auto t = Clock::now();
      const auto& leaver = handles_[order[static_cast<std::size_t>(k)]];
      leaver.stop();
      leaver.wait();  // it ends once the GridMaster took it out (or after 3 s without an answer)
      ops.push_back(counted(false, 1e3 * seconds_since(t)));
    }
    return ops;
  }

 private:
  actors::NodeHandle start(std::uint64_t id, const caf::actor& seed) {
    actors::NodeOptions options;
    options.config = cfg_;
    options.node_id = id;
    options.listen = false;
    options.seed_node = seed;
    options.report_interval = std::chrono::milliseconds(o_.report_ms);
    options.join_timeout = std::chrono::seconds(600);
    auto started = runtime_.start_node(options);
    if (!started) fail("node " + std::to_string(id) + ": " + started.error().to_string());
    return started.value();
  }

  // The GridMaster's figures for the join or leave just made, which it must have counted.
  Op counted(bool join, double ms) {
    const actors::MembershipFigures now = view_of(handles_[0]).membership;
    if (join ? now.joins != last_.joins + 1 : now.leaves != last_.leaves + 1)
      fail(std::string("the GridMaster did not count the ") + (join ? "join" : "leave"));
    const Op op = op_figures(last_, now, join, ms);
    last_ = now;
    return op;
  }

  static void welcomed(const actors::NodeHandle& h) {
    if (h.wait_joined().result != actors::JoinResult::welcomed) fail("node " + std::to_string(h.id()) + " not welcomed");
  }

  const Options& o_;
  config::Config cfg_;
  actors::Runtime runtime_;
  std::vector<actors::NodeHandle> handles_;
  caf::actor seed_;
  std::string shape_;
  actors::MembershipFigures last_;  // the GridMaster's figures, as last read
};

}  // namespace

int main(int argc, char** argv) {
  Options o = parse_options(argc, argv);
  if (o.header) {
    print_header();
    return 0;
  }
  spdlog::set_level(spdlog::level::warn);  // a line per join and leave would be most of the output
  o.sets.insert(o.sets.begin(), {"learner.kind=probe", "learner.probe_floats=" + std::to_string(o.floats),
                                 "grid.dims=" + std::to_string(o.dims)});
  auto cfg = config::load_string("{}", "<bench>", o.sets);
  if (!cfg) fail(cfg.error().to_string());
  Cluster cluster(o, cfg.value());  // never torn down: the process ends with _Exit (see the top of this file)
  const auto t_form = Clock::now();
  const double form_s = cluster.form();
  const double rounds_per_s = cluster.rounds_per_second();
  // The joins, then the leaves; medians (a join that grows the grid's side costs more, shown by the max).
  const std::vector<Op> joins = cluster.joins();
  const std::vector<Op> leaves = cluster.leaves();
  const double total_s = seconds_since(t_form);
  auto med = [](const std::vector<Op>& v, double Op::*field) {
    std::vector<double> x;
    for (const Op& op : v) x.push_back(op.*field);
    return median(x);
  };
  auto max_of = [](const std::vector<Op>& v, double Op::*field) {
    double m = 0;
    for (const Op& op : v) m = std::max(m, op.*field);
    return m;
  };
  const actors::MembershipFigures& last = cluster.membership();
  const double build_us = last.state_builds ? static_cast<double>(last.state_build_ns) / last.state_builds / 1e3 : 0;

  std::printf("%6d %2d %-10s %7.2f %8.0f %9.0f | %8.2f %5.0f %5.0f %7.0f | %8.2f %5.0f %5.0f %7.0f | %7.1f | %8.0f "
              "%6.2f %7.0f %6.2f\n",
              o.nodes, o.dims, cluster.shape().c_str(), form_s, static_cast<double>(rss_kib()) / 1024.0,
              rounds_per_s, med(joins, &Op::wall_ms), med(joins, &Op::messages), max_of(joins, &Op::messages),
              med(joins, &Op::gm_us), med(leaves, &Op::wall_ms), med(leaves, &Op::messages),
              max_of(leaves, &Op::messages), med(leaves, &Op::gm_us),
              o.dims * std::pow(static_cast<double>(o.nodes), 1.0 / o.dims), build_us,
              static_cast<double>(last.state_builds) / static_cast<double>(last.joins + last.leaves),
              static_cast<double>(last.states_sent) / total_s, static_cast<double>(last.states_sent) / total_s / o.nodes);
  std::fflush(stdout);
  std::_Exit(0);  // no teardown: see the top of this file
}
