#include "actors/system_config.hpp"

#include <caf/io/middleman.hpp>
#include <caf/thread_hook.hpp>

#include <chrono>

#include "actors/gate.hpp"
#include "actors/messages.hpp"

namespace gridtrain::actors {

namespace {

// Enters each thread CAF starts in a ThreadClocks, and takes it out as it ends.
class CountedThreads : public caf::thread_hook {
 public:
  explicit CountedThreads(std::shared_ptr<base::ThreadClocks> clocks) : clocks_(std::move(clocks)) {}
  void init(caf::actor_system&) override {}
  void thread_started() override { clocks_->enter(); }
  void thread_terminates() override { clocks_->leave(); }

 private:
  std::shared_ptr<base::ThreadClocks> clocks_;
};

}  // namespace

SystemConfig::SystemConfig(const config::Config& config) {
  load<caf::io::middleman>();
  register_message_types(*this);
  add_error_category(kGateErrorCategory,
                     [](std::uint8_t code, caf::atom_value, const caf::message& context) {
                       return render_gate_error(code, context);
                     });
  set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(config.cluster.heartbeat_ms)});
  set("middleman.connection-timeout",
      caf::timespan{std::chrono::milliseconds(config.cluster.connection_timeout_ms)});
  set("middleman.enable-automatic-connections", false);  // see direct_connection.hpp
  set("scheduler.policy", caf::atom("sharing"));
  set("scheduler.max-throughput", std::size_t{max_throughput});
  set("scheduler.max-threads", std::size_t{worker_threads});
  add_thread_hook<CountedThreads>(actor_threads_);
}

}  // namespace gridtrain::actors
