// gridnode chaos: a local training cluster of N `gridnode run` processes on loopback (the demo's MLP on
// Fashion-MNIST, or the probe learner) under random faults, for our users and for us. Not part of the tests: a
// run takes minutes. As named steps:
//   1. write_config   DIR/cluster.yaml: the product's defaults (timeout quorum, failure detection), checkpoints
//   2. start_nodes    one at a time, each joining through those started before
//   3. inject         every --every seconds, a fault on a random node: kill (SIGKILL, then started again with
//                     --resume), stop (SIGSTOP for --stop-seconds, then SIGCONT) or restart (SIGTERM: it leaves
//                     cleanly, then starts again with --resume). Node 0 is only ever stopped, never killed, so
//                     that one process lives through the whole run and its memory says whether the churn leaks
//                     (--kills-only: every fault is a kill, node 0 included).
//                     --target grid-master: the fault always hits the node that hosts the GridMaster.
//                     After each fault it watches the grid (status, every 50 ms) and measures the time to the
//                     survivors' rounds going on without the victim and, when the victim hosted the GridMaster,
//                     to a higher epoch and to the first rounds under it; then that the victim is back.
//                     --partitions: the nodes run in network namespaces of their own (app/net_lab.hpp), and
//                     every other fault cuts the network instead, for --cut-seconds: one node from the rest, a
//                     minority from a majority (holding the GridMaster's node every other time), two halves, in
//                     turn. Each cut is watched (every node asked at once, through the lab's observer): the time
//                     until the majority's nodes run rounds in a grid of their own, and that no two GridMasters
//                     answer at once (split brain: one elected on the minority's side, or the old one going on
//                     beside a new one); then the heal, and the time until every node runs rounds in one grid.
//                     With finite learner.epochs (--set) a node that has trained them leaves for good: it is no
//                     victim, the grid is whole without it, and the run ends once every node has left.
//   4. report         rounds completed, failovers, those times (median and worst), every node's resident memory
//                     at its start (a minute in) and at the end, and every node's last test accuracy; every
//                     process's output in DIR/node-<i>.log.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "actors/runtime.hpp"
#include "app/child_process.hpp"
#include "app/local_capacity.hpp"
#include "app/commands.hpp"
#include "app/net_lab.hpp"
#include "config/host_port.hpp"

namespace gridtrain::app {

namespace {

// The wall-clock time as the nodes' logs write it (local time, to the millisecond), so that a fault can be found
// in their logs.
std::string log_time() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm local{};
  localtime_r(&t, &local);
  char text[32];
  std::snprintf(text, sizeof text, "%02d:%02d:%02d.%03d", local.tm_hour, local.tm_min, local.tm_sec,
                static_cast<int>(ms));
  return text;
}

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Resident memory of a process in KiB (VmRSS), or -1.
long resident_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("VmRSS:")) return std::stol(line.substr(6));
  return -1;
}

// One node of the cluster across its restarts.
struct Slot {
  std::unique_ptr<ChildProcess> process;
  std::string address;
  std::string log;  // the output of its earlier processes
  Clock::time_point started;
  bool stopped = false;
  std::uint64_t rounds_earlier = 0;  // rounds of its earlier processes
  std::uint64_t rounds_now = 0;      // of this process, the most seen
  long rss_start = -1;               // KiB, a minute after this process started
  long rss_end = -1;
  double accuracy = -1;
  int restarts = 0;
};

struct Figures {
  std::vector<double> rounds_again;  // fault -> the survivors' rounds go on without the victim
  std::vector<double> takeover;      // GridMaster's node killed or stopped -> a higher epoch
  std::vector<double> failover;      // -> the first rounds under it
  std::vector<double> back;          // the victim restarted or woken -> running rounds in the grid again
  std::vector<double> majority_on;   // a cut -> the majority's nodes run rounds in a grid without the others
  std::vector<double> healed;        // the heal -> every node runs rounds in one grid
  int faults = 0, kills = 0, stops = 0, restarts = 0, cuts = 0, missed = 0;
  int two_grid_masters = 0;  // sweeps of a cut in which two GridMasters answered
  int minority_elected = 0;  // cuts in which a side without a strict majority had a GridMaster of a new epoch
};

class Chaos {
 public:
  Chaos(const ChaosArgs& args, std::string exe, std::string dir, NetLab* lab)
      : args_(args), exe_(std::move(exe)), dir_(std::move(dir)), random_(args.random_seed), lab_(lab) {}

  // 1.
  void write_config() {
    config_ = dir_ + "/cluster.yaml";
    std::filesystem::create_directories(dir_ + "/checkpoints");
    std::ofstream(config_) << "# Written by gridnode chaos: the demo's MLP on Fashion-MNIST, the product's defaults "
                              "for quorum and failure detection.\n"
                              "cluster:\n"
                              "  listen: 127.0.0.1:0\n"
                              "grid:\n"
                              "  dims: 2\n"
                              "allreduce:\n"
                              "  elastic_rate: 0.3\n"
                              "learner:\n"
                              "  kind: model\n"
                              "  device: cpu\n"
                              "  threads: 1\n"
                              "  optimizer:\n"
                              "    learning_rate: 0.04\n"
                              "  epochs: 100000\n"
                              "checkpoint:\n"
                              "  dir: "
                           << dir_ << "/checkpoints\n  every: 200\n";
  }

  // 2.
  Status start_nodes() {
    slots_.resize(static_cast<std::size_t>(args_.nodes));
    for (std::size_t i = 0; i < slots_.size(); ++i)
      if (Status started = start(i); !started.ok()) return started;
    return {};
  }

  // 3.
  void inject() {
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(args_.minutes * 60.0));
    auto next = Clock::now() + std::chrono::seconds(args_.every);
    while (Clock::now() < end && (args_.faults == 0 || figures_.faults < args_.faults) && !stop_requested()) {
      while (Clock::now() < std::min(next, end) && !stop_requested() && expected() > 0) {
        observe();
        std::this_thread::sleep_for(200ms);
      }
      if (expected() == 0) {
        std::cout << "chaos: every node has trained its epochs and left" << std::endl;
        break;
      }
      if (stop_requested() || Clock::now() >= end) break;
      next = Clock::now() + std::chrono::seconds(args_.every);
      fault();
    }
  }

  // 4.
  int report() {
    observe();
    for (auto& slot : slots_)
      if (slot.process && !slot.stopped) slot.rss_end = resident_kib(slot.process->pid());
    std::uint64_t rounds = 0;
    for (const auto& slot : slots_) rounds += slot.rounds_earlier + slot.rounds_now;
    // Counted before the nodes are stopped: as they leave one by one, the last ones take over in turn.
    int took_over = 0;
    for (const auto& slot : slots_)
      took_over += count(slot.log + (slot.process ? slot.process->output() : ""), "took over as the cluster's");
    for (auto& slot : slots_) {
      if (!slot.process) continue;
      if (slot.stopped) slot.process->signal(SIGCONT);
      slot.process->signal(SIGTERM);
      slot.process->wait_exit(10s);
      slot.log += slot.process->output();
    }
    std::cout << "\nchaos: " << figures_.faults << " faults (" << figures_.kills << " kills, " << figures_.stops
              << " stops, " << figures_.restarts << " restarts, " << figures_.cuts << " cuts) in "
              << seconds(Clock::now() - began_) / 60.0 << " min; " << figures_.missed << " not recovered\n"
              << "rounds completed: " << rounds << "\n"
              << "failovers: " << took_over << " (a node took over as GridMaster), epochs seen: "
              << epochs_seen_ << " (from " << first_epoch_ << " to " << epoch_ << ")\n";
    summary("fault -> survivors' rounds go on", figures_.rounds_again);
    summary("GridMaster's node lost -> higher epoch", figures_.takeover);
    summary("GridMaster's node lost -> rounds under it", figures_.failover);
    summary("victim restarted or woken -> back in rounds", figures_.back);
    if (lab_) {
      summary("cut -> the majority's rounds go on", figures_.majority_on);
      summary("heal -> one grid, every node in rounds", figures_.healed);
      std::cout << "split brain: " << figures_.two_grid_masters << " sweeps with two GridMasters answering, "
                << figures_.minority_elected << " cuts with a GridMaster elected without a majority\n";
    }
    std::cout << "node  restarts  rss_start_kib  rss_end_kib  growth  lived_s  test_accuracy\n";
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      char line[160];
      const double growth = s.rss_start > 0 && s.rss_end > 0 ? 100.0 * (s.rss_end - s.rss_start) / s.rss_start : 0;
      std::snprintf(line, sizeof line, "%4zu  %8d  %13ld  %11ld  %5.1f%%  %7.0f  %13.4f\n", i, s.restarts,
                    s.rss_start, s.rss_end, growth, seconds(Clock::now() - s.started), s.accuracy);
      std::cout << line;
      std::ofstream(dir_ + "/node-" + std::to_string(i) + ".log") << s.log;
    }
    std::cout << "chaos: logs in " << dir_ << std::endl;
    const bool split = figures_.two_grid_masters > 0 || figures_.minority_elected > 0;
    return figures_.missed == 0 && !split ? kOk : kInternal;
  }

  static bool stop_requested();

 private:
  Status start(std::size_t i) {
    Slot& slot = slots_[i];
    // In the lab each node is a host of its own, at a port of its own namespace.
    const std::string listen = lab_ ? lab_->address(i) + ":7000" : "127.0.0.1:0";
    std::vector<std::string> argv{"run", "--config", config_, "--listen", listen, "--name", std::to_string(i),
                                  "--shard-index", std::to_string(i), "--shard-count", std::to_string(args_.nodes)};
    const std::string seeds = running_addresses();
    if (!seeds.empty()) argv.insert(argv.end(), {"--seed", seeds});
    if (std::filesystem::exists(dir_ + "/checkpoints/node-" + std::to_string(i) + ".ckpt"))
      argv.push_back("--resume");
    for (const auto& o : args_.overrides) argv.insert(argv.end(), {"--set", o});
    if (lab_) argv.insert(argv.begin(), exe_);
    auto started = lab_ ? ChildProcess::start(lab_->exec_program(), lab_->exec_args(i, argv))
                        : ChildProcess::start(exe_, argv);
    if (!started) return started.error();
    slot.process = std::move(started).value();
    slot.started = Clock::now();
    slot.rss_start = slot.rss_end = -1;
    slot.stopped = false;
    auto listening = slot.process->wait_for_line("listening on ", 30s);
    auto joined = slot.process->wait_for_line("joined the cluster", 60s);
    if (!listening || !joined)
      return Error{.source = "chaos",
                   .message = "node " + std::to_string(i) + " did not join:\n" + slot.process->output()};
    slot.address = listening->substr(listening->find("listening on ") + 13);
    std::cout << "[node " << i << "] " << *joined << " at " << slot.address << std::endl;
    return {};
  }

  std::string running_addresses() const {
    std::string out;
    for (const auto& slot : slots_)
      if (slot.process && !slot.stopped && !slot.address.empty()) out += (out.empty() ? "" : ",") + slot.address;
    return out;
  }

  // The live grid, asked of the running nodes in turn.
  std::optional<actors::GridView> view() {
    for (const auto& slot : slots_) {
      if (!slot.process || slot.stopped || slot.address.empty()) continue;
      auto endpoint = config::parse_host_port(slot.address);
      if (!endpoint) continue;
      auto asked = runtime_.grid_view(endpoint.value(), {}, 2s);  // the chaos cluster has no token, no TLS
      if (asked) return std::move(asked).value();
    }
    return std::nullopt;
  }

  // Reads the grid: rounds, accuracies, the epoch; and each process's memory a minute after its start.
  std::optional<actors::GridView> observe() {
    auto v = view();
    for (auto& slot : slots_)
      if (slot.process && !slot.stopped && slot.rss_start < 0 && Clock::now() - slot.started > 60s)
        slot.rss_start = resident_kib(slot.process->pid());
    if (!v) return v;
    if (v->epoch > epoch_) {
      ++epochs_seen_;
      if (epoch_ == 0) first_epoch_ = v->epoch;
      epoch_ = v->epoch;
    }
    for (const auto& n : v->nodes)
      for (auto& slot : slots_)
        if (slot.address == n.place.address) {
          slot.rounds_now = std::max(slot.rounds_now, n.figures.rounds_done);
          if (n.figures.test_accuracy >= 0) slot.accuracy = n.figures.test_accuracy;
        }
    return v;
  }

  std::size_t slot_of(std::uint64_t node, const actors::GridView& v) const {
    for (const auto& n : v.nodes)
      if (n.place.node_id == node)
        for (std::size_t i = 0; i < slots_.size(); ++i)
          if (slots_[i].address == n.place.address) return i;
    return slots_.size();
  }

  void fault() {
    if (lab_ && figures_.faults % 2 == 1) {
      cut();
      return;
    }
    auto before = observe();
    if (!before) {
      std::cout << "chaos: no grid to read before the fault; skipping it" << std::endl;
      return;
    }
    const std::size_t gm = slot_of(before->grid_master_node, *before);
    std::size_t victim;
    if (args_.target_grid_master && gm < slots_.size()) {
      victim = gm;
    } else {
      victim = std::uniform_int_distribution<std::size_t>(0, slots_.size() - 1)(random_);
    }
    if (finished(slots_[victim])) {
      std::cout << "chaos: node " << victim << " has trained its epochs and left; no fault this time" << std::endl;
      return;
    }
    // Node 0 lives through the run: it is only stopped (but for --kills-only). The others are killed, stopped or
    // restarted.
    int kind = args_.kills_only ? 0 : victim == 0 ? 1 : std::uniform_int_distribution<int>(0, 2)(random_);
    static const char* const kNames[] = {"kill", "stop", "restart"};
    std::cout << "chaos: " << log_time() << " " << kNames[kind] << " node " << victim
              << (victim == gm ? " (hosts the GridMaster)" : "") << std::endl;
    ++figures_.faults;
    std::map<std::string, std::uint64_t> rounds_at;
    for (const auto& n : before->nodes) rounds_at[n.place.address] = n.figures.rounds_done;
    Slot& slot = slots_[victim];
    const std::string victim_address = slot.address;
    const auto at = Clock::now();
    if (kind == 0) {
      ++figures_.kills;
      slot.process->signal(SIGKILL);
      slot.process->wait_exit(5s);
    } else if (kind == 1) {
      ++figures_.stops;
      slot.process->signal(SIGSTOP);
      slot.stopped = true;
    } else {
      ++figures_.restarts;
      slot.process->signal(SIGTERM);
      slot.process->wait_exit(15s);
    }
    if (kind != 1) retire(slot);
    watch_recovery(victim, before->epoch, victim == gm, victim_address, rounds_at, at);
    if (kind == 1) {
      const auto wake = at + std::chrono::seconds(args_.stop_seconds);
      while (Clock::now() < wake) std::this_thread::sleep_for(100ms);
      slot.process->signal(SIGCONT);
      slot.stopped = false;
    } else {
      ++slot.restarts;
      if (Status started = start(victim); !started.ok()) {
        std::cout << "chaos: restarting node " << victim << " failed: " << started.error().to_string() << std::endl;
        ++figures_.missed;
        return;
      }
    }
    watch_back(victim);
  }

  // One sweep of a cut: every running node asked for its grid, all at once (a node that lost its GridMaster
  // answers that it has none; one whose GridMaster is cut off from it does not answer within the second). What
  // each node's GridMaster answered, by node.
  std::vector<std::optional<actors::GridView>> sweep() {
    std::vector<std::optional<actors::GridView>> views(slots_.size());
    std::vector<std::thread> askers;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const Slot& slot = slots_[i];
      if (!slot.process || slot.stopped || slot.address.empty()) continue;
      auto endpoint = config::parse_host_port(slot.address);
      if (!endpoint) continue;
      askers.emplace_back([this, &views, i, at = endpoint.value()] {
        auto asked = runtime_.grid_view(at, {}, 1s);
        if (asked) views[i] = std::move(asked).value();  // each asker writes its own element
      });
    }
    for (auto& asker : askers) asker.join();
    return views;
  }

  // Whether `v` holds exactly the nodes of `side` (by slot), each past its rounds in `rounds_at`.
  bool runs_alone(const actors::GridView& v, const std::vector<bool>& side,
                  const std::map<std::string, std::uint64_t>& rounds_at) const {
    std::size_t members = 0;
    for (const auto& n : v.nodes) {
      std::size_t i = 0;
      while (i < slots_.size() && slots_[i].address != n.place.address) ++i;
      if (i == slots_.size() || !side[i]) return false;
      auto at = rounds_at.find(n.place.address);
      if (at != rounds_at.end() && n.figures.rounds_done <= at->second) return false;
      ++members;
    }
    return members == static_cast<std::size_t>(std::count(side.begin(), side.end(), true));
  }

  // A cut of the network, for --cut-seconds, then its heal; each watched (see the top of this file).
  void cut() {
    auto before = observe();
    if (!before) {
      std::cout << "chaos: no grid to read before the cut; skipping it" << std::endl;
      return;
    }
    const std::size_t n = slots_.size();
    const std::size_t gm = slot_of(before->grid_master_node, *before);
    // One node, a minority (the GridMaster's node in it every other time), two halves: in turn.
    static const char* const kKinds[] = {"one node from the rest", "a minority from a majority", "two halves"};
    const int kind = figures_.cuts % 3;
    std::vector<std::size_t> order(n);
    for (std::size_t i = 0; i < n; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), random_);
    const std::size_t size = kind == 0 ? 1 : kind == 1 ? (n - 1) / 2 : n / 2;
    if (kind == 1 && gm < n) {
      // The GridMaster's node first on side B, or last (on side A), by turn.
      std::erase(order, gm);
      if ((figures_.cuts / 3) % 2 == 0)
        order.insert(order.begin(), gm);
      else
        order.push_back(gm);
    }
    std::vector<std::size_t> side_b(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(size));
    std::vector<bool> on_b(n, false), on_a(n, true);
    for (std::size_t i : side_b) on_b[i] = true, on_a[i] = false;
    // The side with a strict majority of the nodes, if one has it.
    const std::vector<bool>* majority = 2 * (n - size) > n ? &on_a : 2 * size > n ? &on_b : nullptr;
    std::string names;
    for (std::size_t i : side_b) names += (names.empty() ? "" : ",") + std::to_string(i);
    std::cout << "chaos: " << log_time() << " cut " << kKinds[kind] << ": nodes " << names << " apart"
              << (gm < n ? (on_b[gm] ? " (with the GridMaster's node)" : " (the GridMaster's node on the other side)")
                         : "")
              << (majority ? "" : "; neither side has a majority") << std::endl;
    ++figures_.faults;
    ++figures_.cuts;
    std::map<std::string, std::uint64_t> rounds_at;
    for (const auto& node : before->nodes) rounds_at[node.place.address] = node.figures.rounds_done;
    if (Status cut = lab_->cut(side_b); !cut.ok()) {
      std::cout << "chaos: " << cut.error().to_string() << std::endl;
      ++figures_.missed;
      return;
    }
    const auto at = Clock::now();
    bool majority_on = false, elected_apart = false;
    std::string last_seen;  // the majority's last view, for the report where it never ran alone
    while (Clock::now() - at < std::chrono::seconds(args_.cut_seconds)) {
      const auto views = sweep();
      std::map<std::uint64_t, std::uint64_t> masters;  // GridMaster's node -> epoch, as answered in this sweep
      for (std::size_t i = 0; i < n; ++i) {
        if (!views[i]) continue;
        const actors::GridView& v = *views[i];
        masters[v.grid_master_node] = v.epoch;
        // A GridMaster of a new epoch is an election; on a side without a strict majority it is split brain.
        const bool my_side_majority = majority && (*majority)[i];
        if (v.epoch > before->epoch && !my_side_majority && !elected_apart) {
          elected_apart = true;
          ++figures_.minority_elected;
          std::cout << "chaos: SPLIT BRAIN: node " << i << ", on a side without a majority, follows a GridMaster "
                    << "of the new epoch " << v.epoch << std::endl;
        }
        if (my_side_majority && !majority_on) {
          last_seen = "node " + std::to_string(i) + " saw epoch " + std::to_string(v.epoch) + ":";
          for (const auto& node : v.nodes)
            last_seen += " " + node.place.address + " (" + std::to_string(node.figures.rounds_done) + " rounds, " +
                         std::to_string(rounds_at.count(node.place.address) ? rounds_at[node.place.address] : 0) +
                         " at the cut)";
        }
        if (!majority_on && my_side_majority && runs_alone(v, *majority, rounds_at)) {
          majority_on = true;
          const double t = seconds(Clock::now() - at);
          figures_.majority_on.push_back(t);
          std::cout << "chaos: the majority runs rounds on its own after " << t << " s, under epoch " << v.epoch
                    << std::endl;
        }
      }
      if (masters.size() > 1) {
        ++figures_.two_grid_masters;
        std::cout << "chaos: SPLIT BRAIN: " << masters.size() << " GridMasters answered in one sweep" << std::endl;
      }
      std::this_thread::sleep_for(100ms);
    }
    if (majority && !majority_on) {
      ++figures_.missed;
      std::cout << "chaos: the majority did not run rounds on its own within the cut's " << args_.cut_seconds
                << " s; " << (last_seen.empty() ? "no node of it answered" : last_seen) << std::endl;
    }
    if (Status healed = lab_->heal(); !healed.ok()) {
      std::cout << "chaos: " << healed.error().to_string() << std::endl;
      ++figures_.missed;
      return;
    }
    watch_healed();
  }

  // After a heal: until one grid holds every node, each running rounds again.
  void watch_healed() {
    const auto at = Clock::now();
    std::map<std::string, std::uint64_t> rounds_at;
    if (auto v = observe())
      for (const auto& node : v->nodes) rounds_at[node.place.address] = node.figures.rounds_done;
    const std::vector<bool> everyone(slots_.size(), true);
    while (Clock::now() - at < 60s) {
      auto v = observe();
      if (v && runs_alone(*v, everyone, rounds_at)) {
        const double t = seconds(Clock::now() - at);
        figures_.healed.push_back(t);
        std::cout << "chaos: one grid again after " << t << " s, under epoch " << v->epoch << std::endl;
        return;
      }
      std::this_thread::sleep_for(100ms);
    }
    ++figures_.missed;
    std::cout << "chaos: not one grid again within 60 s of the heal" << std::endl;
  }

  // Whether the node of `slot` trained its epochs (finite `learner.epochs`) and left for good: its process ended
  // with exit code 0. A node that crashed did not finish: the grid still misses it.
  static bool finished(Slot& slot) {
    if (!slot.process) return false;
    const std::optional<int> code = slot.process->wait_exit(std::chrono::milliseconds(0));
    return code && *code == 0;
  }

  // The nodes the grid should hold: all but those that finished.
  std::size_t expected() {
    return static_cast<std::size_t>(std::count_if(slots_.begin(), slots_.end(), [](Slot& s) { return !finished(s); }));
  }

  // With finite epochs the run can end while a fault is watched: the victim, or every other node, trained its last
  // epoch and left. Then there is nothing to recover and the watch ends (said once), counting no miss.
  bool ended_under_watch(std::size_t victim) {
    const bool alone = expected() < 2;
    if (!alone && !finished(slots_[victim])) return false;
    std::cout << "chaos: node " << victim << " is not watched: " << (alone ? "the others" : "it")
              << " trained the last epoch and left" << std::endl;
    return true;
  }

  // The process of `slot` is gone: keep its output and rounds.
  void retire(Slot& slot) {
    slot.log += slot.process->output();
    slot.rounds_earlier += slot.rounds_now;
    slot.rounds_now = 0;
    slot.process.reset();
    slot.address.clear();
  }

  // Until the survivors run rounds past `rounds_at` in a grid without the victim (and under a higher epoch, when
  // the victim hosted the GridMaster).
  void watch_recovery(std::size_t victim_slot, std::uint64_t epoch, bool was_gm, const std::string& victim,
                      const std::map<std::string, std::uint64_t>& rounds_at, Clock::time_point at) {
    std::optional<std::map<std::string, std::uint64_t>> at_takeover;
    bool recovered = false;
    while (Clock::now() - at < 30s) {
      if (ended_under_watch(victim_slot)) return;
      auto v = observe();
      std::this_thread::sleep_for(50ms);
      if (!v) continue;
      if (was_gm && !at_takeover && v->epoch > epoch) {
        figures_.takeover.push_back(seconds(Clock::now() - at));
        at_takeover.emplace();
        for (const auto& n : v->nodes) (*at_takeover)[n.place.address] = n.figures.rounds_done;
      }
      if (was_gm && !at_takeover) continue;
      bool on = !v->nodes.empty();
      for (const auto& n : v->nodes) {
        if (n.place.address == victim) on = false;
        const auto& base = at_takeover ? *at_takeover : rounds_at;
        auto b = base.find(n.place.address);
        if (b != base.end() && n.figures.rounds_done <= b->second) on = false;
      }
      if (on) {
        const double t = seconds(Clock::now() - at);
        figures_.rounds_again.push_back(t);
        if (was_gm) figures_.failover.push_back(t);
        std::cout << "chaos: rounds go on without it after " << t << " s"
                  << (was_gm ? ", under epoch " + std::to_string(v->epoch) : "") << std::endl;
        recovered = true;
        break;
      }
    }
    if (!recovered) {
      ++figures_.missed;
      std::cout << "chaos: the survivors did not recover within 30 s" << std::endl;
    }
  }

  // Until the victim runs rounds in the grid again.
  void watch_back(std::size_t victim) {
    const auto at = Clock::now();
    while (Clock::now() - at < 60s) {
      if (ended_under_watch(victim)) return;
      auto v = observe();
      std::this_thread::sleep_for(100ms);
      if (!v) continue;
      for (const auto& n : v->nodes)
        if (n.place.address == slots_[victim].address && n.figures.rounds_done > 0 &&
            v->nodes.size() == expected()) {
          figures_.back.push_back(seconds(Clock::now() - at));
          return;
        }
    }
    ++figures_.missed;
    std::cout << "chaos: node " << victim << " was not back in the grid within 60 s" << std::endl;
  }

  static int count(const std::string& text, const std::string& needle) {
    int n = 0;
    for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
  }

  static void summary(const std::string& what, std::vector<double> times) {
    if (times.empty()) {
      std::cout << what << ": none\n";
      return;
    }
    std::sort(times.begin(), times.end());
    char line[200];
    std::snprintf(line, sizeof line, "%s: median %.3f s, worst %.3f s over %zu\n", what.c_str(),
                  times[times.size() / 2], times.back(), times.size());
    std::cout << line;
  }

  const ChaosArgs& args_;
  std::string exe_;
  std::string dir_;
  std::string config_;
  std::mt19937 random_;
  NetLab* lab_;  // --partitions: the nodes' namespaces and switch; else none (loopback)
  actors::Runtime runtime_{config::Config{}};
  std::vector<Slot> slots_;
  Figures figures_;
  std::uint64_t epoch_ = 0;        // the newest seen
  std::uint64_t first_epoch_ = 0;  // the first seen
  // Counted, not epoch_ - first_epoch_ + 1: a takeover adds 1 to the epoch, but a cluster rebuilt after losing its
  // majority bootstraps from the wall clock (milliseconds), which the difference would count as millions.
  std::uint64_t epochs_seen_ = 0;
  Clock::time_point began_ = Clock::now();
};

std::atomic<int> chaos_signal{0};
extern "C" void on_chaos_signal(int sig) { chaos_signal.store(sig); }
bool Chaos::stop_requested() { return chaos_signal.load() != 0; }

}  // namespace

int chaos(const ChaosArgs& args, const char* argv0) {
  if (args.nodes < 3) return fail(kBadInput, "chaos: --nodes must be at least 3 (a majority must survive a fault)");
  if (Status fits = fits_here("chaos", args.nodes); !fits.ok()) return fail(kBadInput, fits.error().message);
  if (args.minutes <= 0 || args.every < 1 || args.stop_seconds < 1 || args.faults < 0)
    return fail(kBadInput, "chaos: --minutes, --every and --stop-seconds must be positive, --faults not negative");
  std::error_code ec;
  std::filesystem::create_directories(args.out, ec);
  if (ec) return fail(kBadInput, "chaos: cannot create " + args.out + ": " + ec.message());
  if (args.cut_seconds < 1) return fail(kBadInput, "chaos: --cut-seconds must be positive");
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  std::signal(SIGINT, on_chaos_signal);
  std::signal(SIGTERM, on_chaos_signal);
  spdlog::set_level(spdlog::level::warn);
  std::unique_ptr<NetLab> lab;
  if (args.partitions) {
    auto made = NetLab::create(static_cast<std::size_t>(args.nodes));
    if (!made) return fail(kBadInput, "chaos: " + made.error().to_string());
    lab = std::move(made).value();
    // Before the runtime below starts its threads: they reach the nodes from the observer's namespace.
    if (Status entered = lab->enter_observer(); !entered.ok()) return fail(kInternal, entered.error().to_string());
  }
  Chaos run(args, self_exe(argv0), std::filesystem::absolute(args.out).string(), lab.get());
  run.write_config();
  std::cout << "chaos: " << args.nodes << " nodes for " << args.minutes << " min, a fault every " << args.every
            << " s" << std::endl;
  if (Status started = run.start_nodes(); !started.ok()) return fail(kInternal, started.error().to_string());
  run.inject();
  return run.report();
}

}  // namespace gridtrain::app
