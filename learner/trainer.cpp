#include "learner/trainer.hpp"

#include "learner/round_pacing.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <span>

namespace gridtrain::learner {

Trainer::Trainer(TrainerSetup setup) : setup_(std::move(setup)) {}

Trainer::~Trainer() {
  stop();
  join();
}

void Trainer::start() { thread_ = std::thread([this] { run(); }); }

void Trainer::join() {
  if (thread_.joinable()) thread_.join();
}

Result<learner::CheckpointData> Trainer::checkpoint_data(learner::Learner& l) {
  // First: it hands the model to the host, so that the store read below is the model too.
  auto state = l.optimizer_state();
  if (!state) return state.error();
  learner::CheckpointData data;
  data.signature = l.params().signature();
  data.step = l.steps();
  data.epoch = static_cast<std::uint64_t>(l.epoch());
  data.params.resize(l.params().size());
  l.params().fetch(data.params);
  data.optimizer_state.assign(state.value().begin(), state.value().end());
  // The outer step's state (allreduce.outer nesterov), where the rounds made some.
  if (l.params().has_outer()) {
    const std::size_t n = l.params().size();
    data.outer_state.resize(2 * n);
    l.params().outer_state(std::span<float>(data.outer_state).first(n), std::span<float>(data.outer_state).last(n));
  }
  return data;
}

Status Trainer::restore(learner::Learner& l, const learner::CheckpointData& data) {
  // The progress first: it hands the model to the host, so that what is written below lands whole.
  if (Status moved = l.restore_progress(data.step); !moved) return moved;
  l.params().assign(data.params);
  auto state = l.optimizer_state();
  if (!state) return state.error();
  std::span<float> to = state.value();
  std::copy_n(data.optimizer_state.begin(), std::min(to.size(), data.optimizer_state.size()), to.begin());
  // After assign, which forgot any outer state: a node that then copies a peer's model (warm start) forgets this
  // too, and makes its own from that model.
  if (data.outer_state.size() == 2 * data.params.size() && !data.outer_state.empty()) {
    const std::size_t n = data.params.size();
    l.params().set_outer_state(std::span<const float>(data.outer_state).first(n),
                               std::span<const float>(data.outer_state).last(n));
  }
  return {};
}

Status Trainer::write_checkpoint() {
  auto data = checkpoint_data(*setup_.learner);
  if (!data) return data.error();
  auto status = learner::write_checkpoint(setup_.checkpoint_path, data.value());
  // A failed write leaves the previous checkpoint intact; training goes on and the next one may succeed. A full
  // disk fails every write: said when it starts, once a minute while it lasts, and when a write succeeds again.
  if (!status) {
    checkpoint_failures_.fetch_add(1);
    switch (checkpoint_streak_.failed(FailureStreak::Clock::now())) {
      case FailureStreak::Say::first:
        spdlog::error("checkpoint not written: {} (training goes on; said again once a minute while writes fail)",
                      status.error().to_string());
        break;
      case FailureStreak::Say::again:
        spdlog::error("checkpoint still not written, {} failures in a row: {}", checkpoint_streak_.failures(),
                      status.error().to_string());
        break;
      default: break;
    }
  } else if (checkpoint_streak_.succeeded() == FailureStreak::Say::recovered) {
    spdlog::info("checkpoint written again, after {} failed writes: {}", checkpoint_streak_.failures(),
                 setup_.checkpoint_path);
  }
  return {};
}

void Trainer::run() {
  auto& l = *setup_.learner;
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto epoch_start = start;
  std::uint64_t epoch_samples = l.samples();
  std::uint64_t epoch_steps = l.steps();
  std::uint64_t epoch_rounds = setup_.rounds ? setup_.rounds() : 0;
  std::chrono::nanoseconds waited{0};
  bool reported = false;
  StalenessBound bound(setup_.staleness_bound, setup_.rounds, setup_.averaging);
  RoundPacing pacing(setup_.every_steps, setup_.cpu_share, setup_.averaging_cpu, setup_.rounds);
  const bool paced = pacing.active() && setup_.on_every_steps;
  auto step_start = clock::now();
  const auto ckpt_every = static_cast<std::uint64_t>(std::max(setup_.checkpoint_every, 0));
  while (!l.done() && !stop_.load()) {
    int epoch_before = l.epoch();
    // The loss is read once an epoch, at the report: on a GPU no step waits for its own.
    auto stepped = l.step(Learner::LossRead::later);
    if (!stepped) return finish(stepped.error());
    if (setup_.progress) setup_.progress->samples.store(l.samples(), std::memory_order_relaxed);
    if (paced) {
      const auto stepped_at = clock::now();
      if (pacing.after_step(l.steps(), stepped_at - step_start)) setup_.on_every_steps();
      step_start = stepped_at;
    }
    if (bound.reached(l.steps())) {
      // Where the learner paces the rounds, the line may be waiting for this node's allowance.
      if (setup_.on_every_steps) setup_.on_every_steps();
      waited += bound.wait(l.steps(), [this] { return stop_.load(); });
    }
    if (ckpt_every && !setup_.checkpoint_path.empty() && l.steps() % ckpt_every == 0) {
      if (Status written = write_checkpoint(); !written) return finish(written);
    }
    if (l.epoch() == epoch_before) continue;

    // samples/s is the training rate: the test evaluation that follows an epoch is not part of it (it would make
    // short epochs, a node's 1/N shard, look slower than long ones).
    // Taking the losses waits for the epoch's last step (on a GPU, steps are queued ahead): before the clock.
    auto losses = l.take_loss_totals();
    if (!losses) return finish(losses.error());
    const auto trained = clock::now();
    auto evaluated = l.evaluate(setup_.test);
    if (!evaluated) return finish(evaluated.error());
    const learner::Evaluation& eval = evaluated.value();
    auto now = clock::now();
    EpochReport r;
    r.epoch = l.epoch();
    r.samples = l.samples();
    r.time_s = std::chrono::duration<double>(now - start).count();
    double seconds = std::chrono::duration<double>(trained - epoch_start).count();
    r.samples_per_s = seconds > 0 ? static_cast<double>(r.samples - epoch_samples) / seconds : 0;
    r.loss = losses.value().samples ? losses.value().loss / static_cast<double>(losses.value().samples) : 0;
    r.test_loss = eval.loss;
    r.test_accuracy = eval.accuracy;
    r.rounds = setup_.rounds ? setup_.rounds() : 0;
    r.waited_s = std::chrono::duration<double>(waited).count();
    std::uint64_t new_rounds = r.rounds - std::min(r.rounds, epoch_rounds);
    r.tau = new_rounds ? static_cast<double>(l.steps() - epoch_steps) / static_cast<double>(new_rounds)
                       : std::numeric_limits<double>::infinity();
    final_accuracy_.store(eval.accuracy);
    if (setup_.progress) {
      setup_.progress->test_accuracy.store(eval.accuracy, std::memory_order_relaxed);
      setup_.progress->epochs_done.store(static_cast<std::uint32_t>(r.epoch), std::memory_order_relaxed);
    }
    reported = true;
    if (setup_.on_epoch) setup_.on_epoch(r);
    epoch_start = now;
    epoch_samples = r.samples;
    epoch_steps = l.steps();
    epoch_rounds = r.rounds;
    waited = {};
  }
  // Stopped mid-epoch, or resumed already done: the final accuracy is the current model's.
  if (!reported || stop_.load()) {
    auto evaluated = l.evaluate(setup_.test);
    if (!evaluated) return finish(evaluated.error());
    final_accuracy_.store(evaluated.value().accuracy);
  }
  if (ckpt_every && !setup_.checkpoint_path.empty()) return finish(write_checkpoint());
  finish({});
}

void Trainer::finish(Status status) {
  status_ = std::move(status);
  done_.store(true);  // after status_: a reader that sees done() sees it
}

}  // namespace gridtrain::learner
