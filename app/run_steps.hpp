#pragma once
// The steps of `gridnode run` that every host of a node takes, gridnode's own command and the Python module alike
// (python/): the node's plan from its config and options, its metrics endpoint, the node itself, the verdict on its
// join, its warm start, the start line with the other members, and the upkeep while it runs. app/run_command.cpp
// lists all of run's steps in order; this file holds those that do not train.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/runtime.hpp"
#include "app/commands.hpp"
#include "base/result.hpp"
#include "config/config.hpp"
#include "config/host_port.hpp"
#include "learner/parameter_store.hpp"
#include "learner/training_progress.hpp"
#include "telemetry/prometheus_metrics.hpp"

namespace gridtrain::app {

struct RunPlan {
  config::Config config;
  std::vector<config::HostPort> seeds;  // asked in order; none: bootstrap a new cluster
  std::string name;                     // stable across restarts: the checkpoint's and the CSV rows' name
};

// 1. The run's config with the options' overrides, checked before anything starts. `forced` overrides come after
// the file and before args.overrides (the Python module's learner.kind=external). Errors: bad input, naming the
// option or file:line:col.
Result<RunPlan> configure(const RunArgs& args, const std::vector<std::string>& forced = {});

// 3. The Prometheus endpoint, when metrics.listen asks for one (null otherwise). Error: its address cannot be bound.
Result<std::unique_ptr<telemetry::PrometheusMetrics>> start_metrics(const RunPlan& plan);

// What a training node gives its node (a probe gives nothing: the node makes its own store).
struct NodeModel {
  std::shared_ptr<learner::ParameterStore> store;
  std::shared_ptr<learner::TrainingProgress> progress;  // its figures in the node's reports (gridnode status)
};

// 4. The node, listening and joining (asynchronously). With a model, its rounds are paced by its trainer's
// allowances exactly when learner::paces_rounds says so for allreduce.every_steps and cpu_share.
Result<actors::NodeHandle> start_node(actors::Runtime& runtime, const RunPlan& plan, const NodeModel& model);

// 5. How the join ended: kOk once welcomed (said as the `joined` event); else the exit code gridnode gives it (3
// rejected, 1 unreachable or stopped) and the message of its error line. Blocks until the cluster decides.
// `stopping`: the host asked the node to stop meanwhile (then kOk with an empty message when it did).
struct JoinVerdict {
  int code = kOk;
  std::string message;
  bool welcomed() const { return code == kOk && message.empty(); }
};
JoinVerdict wait_for_join(const RunPlan& plan, const actors::NodeHandle& node, const std::function<bool()>& stopping);

// 6. Joining a cluster that already had members: copy a member's model (a line peer's if there is one). A failure
// is only a warning: the node then trains from its own initialisation.
bool warm_start(const actors::NodeHandle& node);  // whether it copied a member's model

// 7. The start line (--wait-members): whether the cluster has `members` as the node joins (true without a wait), and
// the wait for them, which ends once there are that many, a member already trains, or `stopping` says so. False if
// the node ended meanwhile.
bool members_reached(const actors::NodeHandle& node, int members);
bool wait_for_members(const actors::NodeHandle& node, int members, bool reached,
                      const std::function<bool()>& stopping);

// 8. The upkeep of a running node, called every 100 ms or so from its host's loop: the node's counters to the
// Prometheus endpoint once a second, and after a stall, the memory its backlog took given back to the system.
class NodeUpkeep {
 public:
  NodeUpkeep(const actors::NodeHandle& node, telemetry::PrometheusMetrics* prometheus,
             std::chrono::milliseconds connection_timeout);
  void tick();

 private:
  actors::NodeHandle node_;
  telemetry::PrometheusMetrics* prometheus_;
  std::chrono::steady_clock::time_point scraped_;
  // After a stall: a process that was stopped (SIGSTOP, a frozen VM) wakes to what its peers sent meanwhile, read
  // and dropped in a burst. glibc keeps what the burst freed in its per-thread arenas, so each stall raised a
  // long-lived node's resident memory by up to 2.4 MB for good (a 30-minute chaos run: +5.9%, 45 MB free in the
  // arenas against 73 MB in use; malloc_trim gave 20 MB back). A gap between ticks longer than the connection
  // timeout is a stall; the trim waits until the backlog is through.
  static constexpr auto kNever = std::chrono::steady_clock::time_point::max();
  std::chrono::milliseconds connection_timeout_;
  std::chrono::steady_clock::time_point last_;
  std::chrono::steady_clock::time_point trim_at_ = kNever;
};

// Leaves the cluster cleanly (Leave, then the node ends) and waits until it has.
void leave(const actors::NodeHandle& node);

}  // namespace gridtrain::app
