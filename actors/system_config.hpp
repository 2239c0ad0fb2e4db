#pragma once
// The CAF actor system configuration for a gridtrain process: made from the run config, with every message type
// registered and the middleman (remoting) loaded.
//
//   actors::SystemConfig cfg{config};
//   caf::actor_system system{cfg};   // cfg must outlive system

#include <caf/actor_system_config.hpp>

#include <memory>

#include "base/thread_cpu.hpp"
#include "config/config.hpp"

namespace gridtrain::actors {

class SystemConfig : public caf::actor_system_config {
 public:
  // Sets, besides registering every message type:
  // - middleman.heartbeat-interval and middleman.connection-timeout from cluster.heartbeat_ms and
  //   cluster.connection_timeout_ms. CAF 0.17 defaults the heartbeat to 0, and then a stalled peer is never
  //   declared down.
  // - middleman.enable-automatic-connections = false: racy in CAF 0.17.6; line peers connect to each other
  //   explicitly instead (direct_connection.hpp says why, with the measurements).
  // - scheduler.policy = sharing (one FIFO queue), and at most max_throughput messages per actor per turn.
  //   CAF's default, work stealing, puts an actor woken by another actor at the FRONT of the thread's queue:
  //   while rounds ran back to back, the actors that pass round messages kept both threads busy and a request
  //   from outside (a status query, the report timer) waited behind them for minutes. Sharing is fair.
  // - scheduler.max-threads = worker_threads, not CAF's default of max(4, cores): the actors only pass control
  //   messages (the chunks go over the data plane), and with the sharing policy each message queued wakes an idle
  //   worker. A training node with a peer on 2 cores ran 17 rounds a second in 5% of a core with 4 workers, and
  //   23 with 2 (or 1): the wake-ups were the cost (BENCHMARKS.md, "The cost of a round"). Two, not one, so that a
  //   handler that blocks for a while (a log write, a large message's serialization) does not hold up the rest.
  // - a thread hook that enters every thread CAF starts (its scheduler's workers, its clock, the middleman's
  //   multiplexer, detached actors) in actor_threads(): what the actors' work costs the process, which a training
  //   node counts in its averaging's cost (learner/cpu_share_pacer.hpp).
  explicit SystemConfig(const config::Config& config);

  static constexpr std::size_t max_throughput = 64;
  static constexpr std::size_t worker_threads = 2;

  // The CPU time of the system's threads; shared, so that a reader may outlive the system.
  const std::shared_ptr<base::ThreadClocks>& actor_threads() const { return actor_threads_; }

 private:
  std::shared_ptr<base::ThreadClocks> actor_threads_ = std::make_shared<base::ThreadClocks>();
};

}  // namespace gridtrain::actors
