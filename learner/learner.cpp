#include "learner/learner.hpp"

#include <algorithm>
#include <exception>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "learner/gemm.hpp"
#include "learner/init.hpp"
#include "learner/splitmix64.hpp"

namespace gridtrain::learner {

namespace {

// Fisher-Yates with its own generator: the same order on every platform for one (seed, epoch).
void shuffle(std::vector<std::uint32_t>& order, std::uint64_t seed, int epoch) {
  std::iota(order.begin(), order.end(), 0u);
  std::uint64_t state = seed ^ (0xa0761d6478bd642full * (static_cast<std::uint64_t>(epoch) + 1));
  for (std::size_t i = order.size(); i > 1; --i) {
    // A draw in [0, i) by multiply-shift; its bias, at most i / 2^64, is far below anything training can see.
    const auto j = static_cast<std::size_t>((static_cast<unsigned __int128>(splitmix64(state)) * i) >> 64);
    std::swap(order[i - 1], order[j]);
  }
}

Error data_error(std::string message) {
  return Error{.key = "learner.model", .message = std::move(message)};
}

// What a backend threw (learner/backend.hpp: a device's failure), as the error a learner reports.
Error backend_error(std::string_view backend, const std::exception& e) {
  return Error{.key = "learner.device", .message = "the " + std::string(backend) + " backend failed: " + e.what()};
}

}  // namespace

Result<std::unique_ptr<Learner>> Learner::create(const config::LearnerConfig& config, Dataset train) {
  if (config.batch < 1)
    return Error{.key = "learner.batch", .message = "expected >= 1, found " + std::to_string(config.batch)};
  auto model = Model::build(config.model);
  if (!model.ok()) return model.error();
  if (train.count == 0) return data_error("expected a training shard with at least one sample, found none");
  auto backend = make_backend(config.device, config.precision);
  if (!backend.ok()) return backend.error();
  set_blas_threads(config.threads);
  std::unique_ptr<Learner> learner;
  const std::string name(backend.value().backend->name());
  try {
    learner.reset(new Learner(config, std::move(model).value(), std::move(train), std::move(backend).value()));
  } catch (const std::exception& e) {
    // Out of device memory, say: the GPU was there but cannot take this model.
    return backend_error(name, e);
  }
  if (auto ok = learner->check(learner->train_); !ok.ok()) return ok.error();
  if (Status placed = learner->place_data(); !placed.ok()) return placed.error();
  return learner;
}

Status Learner::place_data() {
  std::optional<std::size_t> free;
  if (Status asked = on_backend([&] { free = backend_->free_bytes(); }); !asked.ok()) return asked;
  const std::size_t bytes = train_.images.size() * sizeof(float) + train_.labels.size() * sizeof(std::int32_t);
  auto placed = place_training_set(config_.data_on_device, config_.device, free, bytes);
  if (!placed.ok()) return placed.error();
  data_ = std::move(placed).value();
  if (!data_.on_device) return {};
  return on_backend([&] { backend_->hold_training_set(train_.images, train_.labels, train_.sample_floats); });
}

Learner::Learner(const config::LearnerConfig& config, Model model, Dataset train, BackendChoice backend)
    : config_(config),
      model_(std::move(model)),
      train_(std::move(train)),
      store_(model_.tensors()),
      optimizer_(config.optimizer, config.epochs, model_),
      backend_(std::move(backend.backend)),
      backend_note_(std::move(backend.note)),
      stack_(model_, *backend_, config.batch),
      order_(train_.count),
      inputs_(model_.input_floats() * static_cast<std::size_t>(config.batch)),
      labels_(static_cast<std::size_t>(config.batch)) {
  steps_per_epoch_ = static_cast<int>((train_.count + config.batch - 1) / config.batch);
  store_.assign(initial_parameters(model_, config.seed));
  backend_->attach(store_, model_, optimizer_, stack_.params(), stack_.grads());
  start_epoch();
}

template <class Fn>
Status Learner::on_backend(Fn&& fn) {
  if (!failed_.ok()) return failed_;
  try {
    fn();
  } catch (const std::exception& e) {
    failed_ = backend_error(backend_->name(), e);
  }
  return failed_;
}

Status Learner::synchronize() {
  return on_backend([&] { backend_->flush(); });
}

Result<std::span<float>> Learner::optimizer_state() {
  if (Status handed = on_backend([&] { backend_->hand_to_host(); }); !handed.ok()) return handed.error();
  return optimizer_.state();
}

Status Learner::check(const Dataset& data) const {
  if (data.sample_floats != model_.input_floats())
    return data_error("expected samples of " + shape_text(model_.input()) + " (" +
                      std::to_string(model_.input_floats()) + " floats) as learner.model.input says, found " +
                      shape_text(data.sample_shape) + " (" + std::to_string(data.sample_floats) + " floats)");
  if (data.images.size() != data.count * data.sample_floats || data.labels.size() != data.count)
    return data_error("expected " + std::to_string(data.count) + " samples, found " +
                      std::to_string(data.images.size()) + " image floats and " + std::to_string(data.labels.size()) +
                      " labels");
  if (data.classes > model_.classes())
    return data_error("expected at most " + std::to_string(model_.classes()) +
                      " classes, the width of the model's last layer; the data has " + std::to_string(data.classes));
  for (std::size_t i = 0; i < data.count; ++i)
    if (data.labels[i] < 0 || data.labels[i] >= model_.classes())
      return data_error("expected labels in [0, " + std::to_string(model_.classes()) + "), found " +
                        std::to_string(data.labels[i]) + " at sample " + std::to_string(i));
  return {};
}

void Learner::start_epoch() {
  shuffle(order_, config_.seed, epoch());
  position_ = 0;
  order_held_ = false;
}

void Learner::train_on_minibatch(int batch, double learning_rate) {
  if (data_.on_device) {
    if (!order_held_) backend_->hold_order(order_);
    order_held_ = true;
    // One unit the backend may record once and replay (Backend::run_step): nothing in it keeps host state.
    backend_->run_step(batch, position_, learning_rate, [&, batch, first = position_] {
      backend_->gather(first, batch, stack_.input(), stack_.labels());
      stack_.start_forward_in_place(batch);
      stack_.backward();
      backend_->update(learning_rate);
    });
    return;
  }
  const std::size_t floats = train_.sample_floats;
  gather_samples(train_.images, train_.labels, floats,
                 std::span(order_).subspan(position_, static_cast<std::size_t>(batch)), inputs_.data(),
                 labels_.data());
  stack_.start_forward(batch, std::span(inputs_).first(batch * floats), std::span(labels_).first(batch));
  stack_.backward();
  backend_->update(learning_rate);
}

Result<StepResult> Learner::step(LossRead read) {
  const std::size_t count = train_.count;
  const int batch = static_cast<int>(std::min<std::size_t>(config_.batch, count - position_));
  const double learning_rate = optimizer_.learning_rate(epoch() + static_cast<double>(position_) / count,
                                                           cluster_size());

  LossResult loss;
  const Status ran = on_backend([&] {
    backend_->prepare();
    train_on_minibatch(batch, learning_rate);
    // Read after the backward pass and update are queued: a GPU keeps busy while the host waits.
    if (read == LossRead::now) loss = stack_.loss();
  });
  if (!ran.ok()) return ran.error();

  position_ += batch;
  samples_.fetch_add(batch, std::memory_order_relaxed);
  steps_.fetch_add(1, std::memory_order_relaxed);
  if (position_ == count) {
    epoch_.fetch_add(1, std::memory_order_relaxed);
    start_epoch();
  }
  if (read == LossRead::later) {
    constexpr double unread = std::numeric_limits<double>::quiet_NaN();
    return StepResult{unread, unread, batch, learning_rate};
  }
  return StepResult{loss.loss, static_cast<double>(loss.correct) / batch, batch, learning_rate};
}

Result<LossTotals> Learner::take_loss_totals() {
  LossTotals totals;
  if (Status taken = on_backend([&] { totals = stack_.take_loss_totals(); }); !taken.ok()) return taken.error();
  totals += std::exchange(taken_, {});
  return totals;
}

Result<Evaluation> Learner::evaluate(const Dataset& data) {
  if (Status fits = check(data); !fits.ok()) return fits.error();
  Evaluation e;
  e.count = data.count;
  if (data.count == 0) return e;
  double loss = 0;
  std::size_t correct = 0;
  const std::size_t floats = data.sample_floats;
  const Status ran = on_backend([&] {
    // The evaluation's losses go through the same Loss: the training steps' are set aside first, and the
    // evaluation's dropped after.
    taken_ += stack_.take_loss_totals();
    backend_->prepare();
    for (std::size_t start = 0; start < data.count; start += config_.batch) {
      const int batch = static_cast<int>(std::min<std::size_t>(config_.batch, data.count - start));
      const LossResult r = stack_.forward(batch, std::span(data.images).subspan(start * floats, batch * floats),
                                          std::span(data.labels).subspan(start, batch));
      loss += r.loss * batch;
      correct += r.correct;
    }
    stack_.take_loss_totals();
  });
  if (!ran.ok()) return ran.error();
  e.loss = loss / data.count;
  e.accuracy = static_cast<double>(correct) / data.count;
  return e;
}

Status Learner::restore_progress(std::uint64_t steps) {
  const std::uint64_t per_epoch = static_cast<std::uint64_t>(steps_per_epoch_);
  const int epoch = static_cast<int>(steps / per_epoch);
  position_ = static_cast<std::size_t>(steps % per_epoch) * config_.batch;
  epoch_.store(epoch, std::memory_order_relaxed);
  steps_.store(steps, std::memory_order_relaxed);
  samples_.store(static_cast<std::uint64_t>(epoch) * train_.count + position_, std::memory_order_relaxed);
  const std::size_t position = position_;
  start_epoch();
  position_ = position;
  return on_backend([&] { backend_->hand_to_host(); });
}

}  // namespace gridtrain::learner
