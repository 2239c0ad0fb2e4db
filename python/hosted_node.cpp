#include "python/hosted_node.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>
#include <limits>

#include "telemetry/event_log.hpp"
#include "telemetry/grid_view_text.hpp"

namespace gridtrain::python {

namespace {

constexpr auto kUpkeepEvery = std::chrono::milliseconds(100);
// How often the upkeep reads the node's members and rounds for data_shard() and report_epoch().
constexpr auto kRefreshEvery = std::chrono::milliseconds(500);

[[noreturn]] void throw_bad_input(const Error& error) { throw Failure(app::kBadInput, error.to_string()); }

// Every call of the host's that reaches the actor system ends with this: the host's threads outlive the system
// (actors::Runtime::release_calling_thread says why).
struct ReleaseThread {
  ~ReleaseThread() { actors::Runtime::release_calling_thread(); }
};

}  // namespace

HostedNode::HostedNode(const app::RunArgs& args) : wait_members_(args.wait_members) {
  if (args.wait_members < 0)
    throw Failure(app::kBadInput, "wait_members: expected a number of members >= 0, found " +
                                      std::to_string(args.wait_members));
  auto plan = app::configure(args, {"learner.kind=external"});
  if (!plan) throw_bad_input(plan.error());
  plan_ = std::move(plan).value();
  if (plan_.config.learner.kind != config::LearnerKind::external)
    throw Failure(app::kBadInput, "--set: learner.kind: the Python front end trains its own model: learner.kind "
                                  "must be external (or left out), found " +
                                      std::string(config::to_string(plan_.config.learner.kind)));
  telemetry::configure_event_log(plan_.config.metrics.log_format, plan_.config.metrics.log_level);
  auto metrics = app::start_metrics(plan_);
  if (!metrics) throw_bad_input(metrics.error());
  prometheus_ = std::move(metrics).value();
  if (!plan_.config.metrics.csv.empty()) {
    auto opened = telemetry::MetricsCsv::open(plan_.config.metrics.csv, /*append=*/false);
    if (!opened) throw_bad_input(opened.error());
    csv_.emplace(std::move(opened).value());
  }
  runtime_.emplace(plan_.config);
}

HostedNode::~HostedNode() { close(); }

std::shared_ptr<learner::ParameterStore> HostedNode::make_model(std::vector<learner::TensorSpec> tensors) {
  if (store_) throw Failure(app::kBadInput, "the node has its model already: one model per node");
  if (tensors.empty()) throw Failure(app::kBadInput, "the model has no parameters to average");
  for (const auto& t : tensors)
    for (int extent : t.shape)
      if (extent < 1)
        throw Failure(app::kBadInput, "parameter '" + t.name + "': an extent of " + std::to_string(extent) +
                                          ": a parameter to average has at least one float");
  store_ = std::make_shared<learner::ParameterStore>(std::move(tensors), learner::UpdateMode::deferred);
  return store_;
}

void HostedNode::join(const std::function<bool()>& interrupted) {
  const ReleaseThread release;
  if (!store_) throw Failure(app::kInternal, "join() before make_model(): the node has no model to average");
  if (handle()) throw Failure(app::kInternal, "the node has joined already");
  if (closing_.load()) throw Failure(app::kInternal, "the node was closed");
  auto started = app::start_node(runtime_->runtime(), plan_, {.store = store_, .progress = progress_});
  if (!started) throw_bad_input(started.error());
  const actors::NodeHandle node = started.value();
  // The verdict blocks until the cluster decides (the join timeout at most); it waits on a thread of its own, so
  // that an interruption (Ctrl-C) is seen within 100 ms and stops the node, which ends the wait.
  std::atomic<bool> stopped_here{false};
  const auto stopping = [&] { return stopped_here.load() || closing_.load(); };
  auto verdict = std::async(std::launch::async, [&] { return app::wait_for_join(plan_, node, stopping); });
  while (verdict.wait_for(kUpkeepEvery) != std::future_status::ready)
    if (!stopped_here && ((interrupted && interrupted()) || closing_.load())) {
      stopped_here = true;
      node.kill();
    }
  const app::JoinVerdict joined = verdict.get();
  if (!joined.welcomed() || stopped_here || closing_.load()) {
    node.kill();
    node.wait();
    if (!joined.message.empty() && !stopped_here) throw Failure(joined.code, joined.message);
    throw Failure(app::kInternal, "the node was stopped before it joined");
  }
  members_at_join_ = app::members_reached(node, wait_members_);
  warm_started_ = app::warm_start(node);
  const config::AllreduceConfig& allreduce = plan_.config.allreduce;
  // What averaging costs this node: the data plane's and the actors' threads, and the pulls' apply on the
  // training thread (apply_pending or take_pending, between the user's optimizer steps).
  std::function<std::chrono::nanoseconds()> averaging_cpu = runtime_->runtime().averaging_cpu();
  if (averaging_cpu)
    averaging_cpu = [threads = std::move(averaging_cpu), store = store_] {
      return threads() + store->deferred_apply_time();
    };
  // The counters, not the handle: the lambdas outlive close(), and with it the node's actor system.
  const auto counters = node.data_counters();
  std::function<std::uint64_t()> rounds;
  if (counters) rounds = [counters] { return actors::rounds_done(*counters); };
  pacing_.emplace(allreduce.every_steps, allreduce.cpu_share, std::move(averaging_cpu), rounds);
  if (counters)
    staleness_.emplace(allreduce.staleness_bound, rounds, [counters] { return actors::averaging(*counters); });
  joined_at_ = last_step_ = Clock::now();
  epoch_marks_ = {};
  std::lock_guard<std::mutex> hold(close_mutex_);
  if (closing_.load()) {
    app::leave(node);
    throw Failure(app::kInternal, "the node was closed as it joined");
  }
  refresh(node);
  epoch_marks_.rounds = node.rounds_done();
  {
    std::lock_guard<std::mutex> set(node_mutex_);
    node_ = node;
  }
  upkeep_ = std::thread([this, node] { upkeep_loop(node); });
}

void HostedNode::wait_for_members(const std::function<bool()>& interrupted) {
  const ReleaseThread release;
  const auto node = handle();
  if (!node) throw Failure(app::kInternal, "wait_for_members() before the node joined");
  const auto stop_waiting = [&] { return closing_.load() || (interrupted && interrupted()); };
  if (!app::wait_for_members(*node, wait_members_, members_at_join_, stop_waiting))
    throw Failure(app::kInternal, "the node ended while it waited for " + std::to_string(wait_members_) + " members");
  if (stop_waiting())
    throw Failure(app::kInternal, "stopped while waiting for " + std::to_string(wait_members_) + " members");
  // The first data_shard() must count every member waited for: the background read may be up to half a second
  // old, and a node that saw fewer would take a larger part of the first epoch and lag the others from then on.
  // The node's own GridState hears of the last join shortly after the GridMaster's view, hence the short poll.
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  do {
    refresh(*node);
    {
      std::lock_guard<std::mutex> hold(cache_mutex_);
      if (static_cast<int>(members_.size()) >= wait_members_) break;
    }
  } while (Clock::now() < deadline && !stop_waiting() && !node->wait_for(std::chrono::milliseconds(20)));
  // Training starts now: the wait is not part of the first epoch's samples/s.
  joined_at_ = last_step_ = Clock::now();
}

std::optional<actors::NodeHandle> HostedNode::handle() const {
  std::lock_guard<std::mutex> hold(node_mutex_);
  return node_;
}

std::uint64_t HostedNode::id() const {
  const auto node = handle();
  return node ? node->id() : 0;
}

std::string HostedNode::address() const {
  const auto node = handle();
  return node ? node->address() : std::string();
}

bool HostedNode::step(std::uint64_t samples) {
  const ReleaseThread release;
  bool allowed = false;
  bool at_bound = false;
  {
    // Uncontended but for a close() from another thread, which this waits for and then refuses.
    std::lock_guard<std::mutex> not_closing(close_mutex_);
    allowed = count_step(samples);
    at_bound = staleness_ && staleness_->reached(steps_);
    if (at_bound && !allowed)  // the line may be waiting for this node's allowance
      if (const auto node = handle())
        node->allow_rounds(1);
  }
  // Outside the lock: a close() from another thread ends the wait, rather than waiting for it.
  if (at_bound) epoch_marks_.waited += staleness_->wait(steps_, [this] { return closing_.load() || ended_.load(); });
  return allowed;
}

bool HostedNode::count_step(std::uint64_t samples) {
  if (closing_.load()) throw Failure(app::kInternal, "the node was closed: it no longer averages");
  if (ended_.load()) throw Failure(app::kInternal, "the node ended unexpectedly: it no longer averages");
  const auto node = handle();
  if (!node) throw Failure(app::kInternal, "step() before the node joined");
  ++steps_;
  const std::uint64_t total = progress_->samples.fetch_add(samples, std::memory_order_relaxed) + samples;
  const auto now = Clock::now();
  if (!epoch_marks_.training) {
    // The epoch's training starts here (less this one step): what came before was the host's evaluation.
    epoch_marks_.training = true;
    epoch_marks_.at = now;
    epoch_marks_.trained_samples = total;
  }
  const bool allow = pacing_->active() && pacing_->after_step(steps_, now - last_step_);
  last_step_ = now;
  if (allow)
    node->allow_rounds(1);
  return allow;
}

learner::EpochReport HostedNode::report_epoch(const EpochFigures& figures) {
  const ReleaseThread release;
  const auto node = handle();
  if (!node) throw Failure(app::kInternal, "report_epoch() before the node joined");
  const auto now = Clock::now();
  learner::EpochReport r;
  r.epoch = figures.epoch;
  r.samples = progress_->samples.load(std::memory_order_relaxed);
  r.time_s = std::chrono::duration<double>(now - joined_at_).count();
  // The training rate: from the epoch's first step to its last, as the Trainer's (the host's evaluation since is
  // not part of it).
  const double seconds =
      epoch_marks_.training ? std::chrono::duration<double>(last_step_ - epoch_marks_.at).count() : 0.0;
  r.samples_per_s =
      seconds > 0 ? static_cast<double>(r.samples - epoch_marks_.trained_samples) / seconds : 0;
  r.loss = figures.loss;
  r.test_loss = figures.test_loss;
  r.test_accuracy = figures.test_accuracy;
  // From the data plane's counters: asking the node here would hold the training loop for as long as a node busy
  // with a failover takes to answer.
  r.rounds = node->rounds_done();
  r.waited_s = std::chrono::duration<double>(epoch_marks_.waited).count();
  const std::uint64_t rounds = r.rounds - std::min(r.rounds, epoch_marks_.rounds);
  r.tau = rounds ? static_cast<double>(steps_ - epoch_marks_.steps) / static_cast<double>(rounds)
                 : std::numeric_limits<double>::infinity();
  if (figures.test_accuracy >= 0) progress_->test_accuracy.store(figures.test_accuracy, std::memory_order_relaxed);
  if (figures.epoch > 0) progress_->epochs_done.store(static_cast<std::uint32_t>(figures.epoch), std::memory_order_relaxed);
  telemetry::tell("epoch", telemetry::progress_line(r), telemetry::epoch_fields(r));
  if (csv_) csv_->write(plan_.name, r);
  if (prometheus_) prometheus_->update(r);
  epoch_marks_ = Marks{};
  epoch_marks_.steps = steps_;
  epoch_marks_.rounds = r.rounds;
  return r;
}

actors::NodeStats HostedNode::stats() const {
  const ReleaseThread release;
  const auto node = handle();
  return node ? node->stats() : actors::NodeStats{};
}

std::string HostedNode::grid_json() const {
  const ReleaseThread release;
  const auto node = handle();
  if (!node) throw Failure(app::kInternal, "the node has not joined a cluster");
  auto view = node->grid_view();
  if (!view) throw Failure(app::kInternal, view.error().to_string());
  return telemetry::grid_view_json(view.value());
}

void HostedNode::upkeep_loop(const actors::NodeHandle& node) {
  app::NodeUpkeep upkeep(node, prometheus_.get(), std::chrono::milliseconds(plan_.config.cluster.connection_timeout_ms));
  auto refreshed = Clock::now();
  while (!node.wait_for(kUpkeepEvery)) {
    if (closing_.load()) return;
    upkeep.tick();
    if (Clock::now() - refreshed >= kRefreshEvery) {
      refresh(node);
      refreshed = Clock::now();
    }
  }
  if (!closing_.load()) {
    ended_.store(true);
    spdlog::error("the node ended unexpectedly: it no longer averages");
  }
}

void HostedNode::refresh(const actors::NodeHandle& node) {
  auto members = node.members();
  std::lock_guard<std::mutex> hold(cache_mutex_);
  if (members) members_ = std::move(members).value();
}

std::pair<std::size_t, std::size_t> HostedNode::data_shard() const {
  const std::uint64_t self = id();
  std::lock_guard<std::mutex> hold(cache_mutex_);
  const auto it = std::find(members_.begin(), members_.end(), self);
  if (self == 0 || it == members_.end())
    throw Failure(app::kInternal, "this node is not among its cluster's members now");
  return {static_cast<std::size_t>(it - members_.begin()), members_.size()};
}

void HostedNode::close() {
  const ReleaseThread release;
  closing_.store(true);  // first: a call waiting with the node sees it and lets go
  std::lock_guard<std::mutex> once(close_mutex_);
  if (upkeep_.joinable()) upkeep_.join();
  std::optional<actors::NodeHandle> node;
  {
    std::lock_guard<std::mutex> take(node_mutex_);
    node.swap(node_);
  }
  if (node) app::leave(*node);
  node.reset();
  // The pacing's clock holds the data plane, whose endpoints hold the node's actors: released first, or the actor
  // system would wait for them for ever.
  pacing_.reset();
  if (runtime_) runtime_->stop();
}

RuntimeThread::RuntimeThread(const config::Config& config) {
  std::promise<actors::Runtime*> made;
  auto ready = made.get_future();
  auto release = release_.get_future();
  thread_ = std::thread([this, &config, made = std::move(made), release = std::move(release)]() mutable {
    std::unique_ptr<actors::Runtime> runtime;
    try {
      runtime = std::make_unique<actors::Runtime>(config);
    } catch (...) {
      made.set_exception(std::current_exception());
      done_.set_value();
      return;
    }
    made.set_value(runtime.get());
    release.wait();
    runtime.reset();
    done_.set_value();
  });
  try {
    runtime_ = ready.get();
  } catch (const std::exception& e) {
    thread_.join();
    throw Failure(app::kInternal, std::string("the actor system did not start: ") + e.what());
  }
}

RuntimeThread::~RuntimeThread() { stop(); }

void RuntimeThread::stop() {
  if (!thread_.joinable()) return;
  runtime_ = nullptr;
  release_.set_value();
  // ~actor_system waits for every actor to end and every detached actor to be destroyed: gridnode bounds that wait
  // and ends the process (app/run_command.cpp, ShutdownLimit). A host's process is not ours to end: after the same
  // limit the actor system is left to its thread, said once, and the host goes on.
  constexpr auto kShutdownLimit = std::chrono::seconds(10);
  if (done_.get_future().wait_for(kShutdownLimit) == std::future_status::ready) {
    thread_.join();
  } else {
    spdlog::error("the node's actor system did not shut down within {} s; left to end in the background",
                  kShutdownLimit.count());
    thread_.detach();
  }
}

}  // namespace gridtrain::python
