#include "learner/trainer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

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

learner::CheckpointData Trainer::checkpoint_data(learner::Learner& l) {
  l.synchronize();
  learner::CheckpointData data;
  data.signature = l.params().signature();
  data.step = l.steps();
  data.epoch = static_cast<std::uint64_t>(l.epoch());
  data.params.resize(l.params().size());
  l.params().fetch(data.params);
  auto state = l.optimizer().state();
  data.optimizer_state.assign(state.begin(), state.end());
  return data;
}

void Trainer::restore(learner::Learner& l, const learner::CheckpointData& data) {
  l.restore_progress(data.step);
  l.params().assign(data.params);
  auto state = l.optimizer().state();
  std::copy_n(data.optimizer_state.begin(), std::min(state.size(), data.optimizer_state.size()), state.begin());
}

void Trainer::write_checkpoint() {
  auto status = learner::write_checkpoint(setup_.checkpoint_path, checkpoint_data(*setup_.learner));
  // A failed write leaves the previous checkpoint intact; training goes on and the next one may succeed.
  if (!status) {
    checkpoint_failures_.fetch_add(1);
    spdlog::error("checkpoint not written: {}", status.error().to_string());
  }
}

void Trainer::run() {
  auto& l = *setup_.learner;
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto epoch_start = start;
  std::uint64_t epoch_samples = l.samples();
  std::uint64_t epoch_steps = l.steps();
  std::uint64_t epoch_rounds = setup_.rounds ? setup_.rounds() : 0;
  double loss_sum = 0;
  int loss_steps = 0;
  bool reported = false;
  const auto every = static_cast<std::uint64_t>(std::max(setup_.every_steps, 0));
  const auto ckpt_every = static_cast<std::uint64_t>(std::max(setup_.checkpoint_every, 0));
  while (!l.done() && !stop_.load()) {
    int epoch_before = l.epoch();
    loss_sum += l.step().loss;
    ++loss_steps;
    if (setup_.progress) setup_.progress->samples.store(l.samples(), std::memory_order_relaxed);
    if (every && setup_.on_every_steps && l.steps() % every == 0) setup_.on_every_steps();
    if (ckpt_every && !setup_.checkpoint_path.empty() && l.steps() % ckpt_every == 0) write_checkpoint();
    if (l.epoch() == epoch_before) continue;

    auto eval = l.evaluate(setup_.test);
    auto now = clock::now();
    EpochReport r;
    r.epoch = l.epoch();
    r.samples = l.samples();
    r.time_s = std::chrono::duration<double>(now - start).count();
    double seconds = std::chrono::duration<double>(now - epoch_start).count();
    r.samples_per_s = seconds > 0 ? static_cast<double>(r.samples - epoch_samples) / seconds : 0;
    r.loss = loss_steps ? loss_sum / loss_steps : 0;
    r.test_loss = eval.loss;
    r.test_accuracy = eval.accuracy;
    r.rounds = setup_.rounds ? setup_.rounds() : 0;
    std::uint64_t new_rounds = r.rounds - std::min(r.rounds, epoch_rounds);
    r.tau = new_rounds ? static_cast<double>(l.steps() - epoch_steps) / static_cast<double>(new_rounds)
                       : std::numeric_limits<double>::infinity();
    final_accuracy_.store(eval.accuracy);
    if (setup_.progress) setup_.progress->test_accuracy.store(eval.accuracy, std::memory_order_relaxed);
    reported = true;
    if (setup_.on_epoch) setup_.on_epoch(r);
    epoch_start = now;
    epoch_samples = r.samples;
    epoch_steps = l.steps();
    epoch_rounds = r.rounds;
    loss_sum = 0;
    loss_steps = 0;
  }
  // Stopped mid-epoch, or resumed already done: the final accuracy is the current model's.
  if (!reported || stop_.load()) final_accuracy_.store(l.evaluate(setup_.test).accuracy);
  if (ckpt_every && !setup_.checkpoint_path.empty()) write_checkpoint();
  done_.store(true);
}

}  // namespace gridtrain::learner
