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

}  // namespace

int main(int argc, char** argv) {
  int nodes = 256, dims = 2, ops = 20;
  double seconds = 5;
  int report_ms = 250;
  int floats = 16;
  bool header = false;
  std::vector<std::string> sets;  // config overrides, as gridnode's --set takes them
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* name) { return !std::strcmp(argv[i], name) && i + 1 < argc; };
    if (arg("--nodes")) nodes = std::atoi(argv[++i]);
    else if (arg("--dims")) dims = std::atoi(argv[++i]);
    else if (arg("--ops")) ops = std::atoi(argv[++i]);
    else if (arg("--seconds")) seconds = std::atof(argv[++i]);
    else if (arg("--report-ms")) report_ms = std::atoi(argv[++i]);
    else if (arg("--floats")) floats = std::atoi(argv[++i]);
    else if (arg("--set")) sets.emplace_back(argv[++i]);
    else if (!std::strcmp(argv[i], "--header")) header = true;
    else {
      std::fprintf(stderr, "usage: bench_control_plane --nodes N --dims D [--ops K] [--seconds S] [--report-ms R] "
                           "[--floats F] [--set key=value]... [--header]\n");
      return 2;
    }
  }
  if (nodes < 2 || dims < 1 || ops < 1 || ops >= nodes || seconds <= 0 || report_ms < 10)
    fail("need --nodes >= 2, --dims >= 1, 1 <= --ops < nodes, --seconds > 0, --report-ms >= 10");
  if (header) {
    std::printf("%6s %2s %-10s %7s %8s %9s | %8s %5s %5s %7s | %8s %5s %5s %7s | %7s | %8s %6s %7s %6s\n", "nodes", "d",
                "shape", "form_s", "rss_MiB", "rounds/s", "join_ms", "msgs", "max", "gm_us", "leave_ms", "msgs", "max",
                "gm_us", "d*n^1/d", "build_us", "b/chg", "state/s", "/node");
    return 0;
  }
  spdlog::set_level(spdlog::level::warn);  // a line per join and leave would be most of the output
  sets.insert(sets.begin(), {"learner.kind=probe", "learner.probe_floats=" + std::to_string(floats),
                             "grid.dims=" + std::to_string(dims)});
  auto cfg = config::load_string("{}", "<bench>", sets);
  if (!cfg) fail(cfg.error().to_string());
  actors::Runtime runtime{cfg.value()};
  auto options = [&](std::uint64_t id, const caf::actor& seed) {
    actors::NodeOptions o;
    o.config = cfg.value();
    o.node_id = id;
    o.listen = false;
    o.seed_node = seed;
    o.report_interval = std::chrono::milliseconds(report_ms);
    o.join_timeout = std::chrono::seconds(600);
    return o;
  };
  auto start = [&](std::uint64_t id, const caf::actor& seed) {
    auto started = runtime.start_node(options(id, seed));
    if (!started) fail("node " + std::to_string(id) + ": " + started.error().to_string());
    return started.value();
  };
  auto welcomed = [](const actors::NodeHandle& h) {
    if (h.wait_joined().result != actors::JoinResult::welcomed) fail("node " + std::to_string(h.id()) + " not welcomed");
  };

  // Form: everyone at once through the first node.
  const auto t_form = Clock::now();
  std::vector<actors::NodeHandle> handles;
  handles.push_back(start(1, caf::actor{}));
  welcomed(handles[0]);
  const caf::actor seed = handles[0].actor();
  for (int i = 2; i <= nodes; ++i) handles.push_back(start(static_cast<std::uint64_t>(i), seed));
  for (const auto& h : handles) welcomed(h);
  const double form_s = seconds_since(t_form);
  actors::GridView view = view_of(handles[0]);
  if (view.nodes.size() != static_cast<std::size_t>(nodes))
    fail("formed with " + std::to_string(view.nodes.size()) + " members, not " + std::to_string(nodes));
  std::string shape;
  for (auto side : view.shape) shape += (shape.empty() ? "" : "x") + std::to_string(side);

  // Rounds, once every node has reported twice.
  std::this_thread::sleep_for(std::chrono::milliseconds(3 * report_ms));
  view = view_of(handles[0]);
  const std::uint64_t rounds_before = rounds_of(view);
  const auto t_rounds = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  view = view_of(handles[0]);
  const double rounds_per_s = static_cast<double>(rounds_of(view) - rounds_before) / seconds_since(t_rounds);
  if (rounds_per_s <= 0) {
    std::size_t reported = 0, with_rounds = 0;
    for (const auto& n : view.nodes) {
      reported += n.param_distance >= 0;
      with_rounds += n.figures.rounds_done > 0;
    }
    fail("no rounds ran in " + std::to_string(seconds) + " s: " + std::to_string(reported) + " of " +
         std::to_string(view.nodes.size()) + " nodes reported, " + std::to_string(with_rounds) +
         " with rounds; layout version " + std::to_string(view.layout_version));
  }

  // Joins, then leaves of random members other than the GridMaster's node (node 1), one after another; the
  // GridMaster's figures after each (medians: a join that grows the grid's side costs more, shown by the max).
  struct Op {
    double wall_ms, messages, gm_us, builds;
  };
  auto op_figures = [](const actors::MembershipFigures& a, const actors::MembershipFigures& b, bool join, double ms) {
    return Op{ms, static_cast<double>(join ? b.join_messages - a.join_messages : b.leave_messages - a.leave_messages),
              static_cast<double>(join ? b.join_ns - a.join_ns : b.leave_ns - a.leave_ns) / 1e3,
              static_cast<double>(b.state_builds - a.state_builds)};
  };
  std::vector<Op> joins, leaves;
  actors::MembershipFigures last = view.membership;
  for (int k = 0; k < ops; ++k) {
    const auto t = Clock::now();
    handles.push_back(start(static_cast<std::uint64_t>(nodes + 1 + k), seed));
    welcomed(handles.back());
    const double ms = 1e3 * seconds_since(t);
    const actors::MembershipFigures now = view_of(handles[0]).membership;
    if (now.joins != last.joins + 1) fail("the GridMaster did not count the join");
    joins.push_back(op_figures(last, now, true, ms));
    last = now;
  }
  std::mt19937_64 rng{7};
  std::vector<std::size_t> order(handles.size() - 1);
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i + 1;
  std::shuffle(order.begin(), order.end(), rng);
  for (int k = 0; k < ops; ++k) {
    const auto t = Clock::now();
    const auto& leaver = handles[order[static_cast<std::size_t>(k)]];
    leaver.stop();
    leaver.wait();  // it ends once the GridMaster took it out (or after 3 s without an answer)
    const double ms = 1e3 * seconds_since(t);
    const actors::MembershipFigures now = view_of(handles[0]).membership;
    if (now.leaves != last.leaves + 1) fail("the GridMaster did not count the leave");
    leaves.push_back(op_figures(last, now, false, ms));
    last = now;
  }
  const double total_s = seconds_since(t_form);
  auto med = [](const std::vector<Op>& v, double Op::*field) {
    std::vector<double> x;
    for (const Op& o : v) x.push_back(o.*field);
    return median(x);
  };
  auto max_of = [](const std::vector<Op>& v, double Op::*field) {
    double m = 0;
    for (const Op& o : v) m = std::max(m, o.*field);
    return m;
  };
  const double build_us = last.state_builds ? static_cast<double>(last.state_build_ns) / last.state_builds / 1e3 : 0;

  std::printf("%6d %2d %-10s %7.2f %8.0f %9.0f | %8.2f %5.0f %5.0f %7.0f | %8.2f %5.0f %5.0f %7.0f | %7.1f | %8.0f "
              "%6.2f %7.0f %6.2f\n",
              nodes, dims, shape.c_str(), form_s, static_cast<double>(rss_kib()) / 1024.0, rounds_per_s,
              med(joins, &Op::wall_ms), med(joins, &Op::messages), max_of(joins, &Op::messages),
              med(joins, &Op::gm_us), med(leaves, &Op::wall_ms), med(leaves, &Op::messages),
              max_of(leaves, &Op::messages), med(leaves, &Op::gm_us), dims * std::pow(static_cast<double>(nodes), 1.0 / dims),
              build_us, static_cast<double>(last.state_builds) / static_cast<double>(last.joins + last.leaves),
              static_cast<double>(last.states_sent) / total_s,
              static_cast<double>(last.states_sent) / total_s / nodes);
  std::fflush(stdout);
  std::_Exit(0);  // no teardown: see the top of this file
}
