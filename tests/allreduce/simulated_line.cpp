#include "tests/allreduce/simulated_line.hpp"

#include <algorithm>
#include <stdexcept>

namespace gridtrain::allreduce::testing {

SimulatedLine::SimulatedLine(std::size_t model_floats, std::uint32_t peers, RoundConfig config, RoundKey key)
    : key_(key) {
  rounds_.reserve(peers);
  for (std::uint32_t i = 0; i < peers; ++i)
    rounds_.push_back(Round::create(key, model_floats, peers, i, config).value());
  contributors_.resize(rounds_.front().partition().chunk_count());
}

void SimulatedLine::reset(const RoundKey& key) {
  key_ = key;
  for (Round& round : rounds_) round.reset(key);
  pending_.clear();
  for (auto& c : contributors_) c.clear();
}

void SimulatedLine::fill(const std::function<float(std::uint32_t, std::size_t)>& value) {
  for (std::uint32_t i = 0; i < peers(); ++i) {
    const std::span<float> s = rounds_[i].send_buffer();
    for (std::size_t t = 0; t < s.size(); ++t) s[t] = value(i, t);
  }
}

void SimulatedLine::scatter(std::uint32_t i) {
  const Partition& part = rounds_[i].partition();
  if (!rounds_[i].started()) {
    for (std::uint32_t c = part.first_chunk(i); c < part.first_chunk(i + 1); ++c) {
      if (rounds_[i].count(c) == 0) contributors_[c].push_back(i);
    }
  }
  queue(i, rounds_[i].scatter());
}

void SimulatedLine::scatter_all() {
  for (std::uint32_t i = 0; i < peers(); ++i) scatter(i);
}

void SimulatedLine::deadline(std::uint32_t i) { queue(i, rounds_[i].deadline_passed()); }

void SimulatedLine::deadline_all() {
  for (std::uint32_t i = 0; i < peers(); ++i) deadline(i);
}

void SimulatedLine::finish(std::uint32_t i) { queue(i, rounds_[i].finish()); }

void SimulatedLine::finish_all() {
  for (std::uint32_t i = 0; i < peers(); ++i) finish(i);
}

Verdict SimulatedLine::deliver(const Message& m) {
  Round& to = rounds_.at(m.send.to);
  Outcome out;
  if (m.send.kind == SendKind::scatter) {
    out = to.on_scatter({key_, m.from, m.send.offset, m.send.data});
    if (out.verdict == Verdict::accepted) contributors_[m.send.chunk].push_back(m.from);
  } else {
    out = to.on_reduced({key_, m.from, m.send.offset, m.send.count, m.send.data, m.send.kind == SendKind::delta});
  }
  ++verdicts_[static_cast<std::size_t>(out.verdict)];
  queue(m.send.to, out.sends);
  return out.verdict;
}

std::size_t SimulatedLine::deliver_if(const std::function<bool(const Message&)>& pick) {
  // Delivering queues answers at the back, so keep going until a pass finds nothing to pick.
  std::size_t delivered = 0;
  for (bool again = true; again;) {
    again = false;
    for (std::size_t k = 0; k < pending_.size();) {
      if (!pick(pending_[k])) {
        ++k;
        continue;
      }
      const Message m = pending_[k];
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(k));
      deliver(m);
      ++delivered;
      again = true;
    }
  }
  return delivered;
}

Message SimulatedLine::take(const std::function<bool(const Message&)>& pick) {
  const auto it = std::find_if(pending_.begin(), pending_.end(), pick);
  if (it == pending_.end()) throw std::logic_error("take: no such message in flight");
  const Message m = *it;
  pending_.erase(it);
  return m;
}

std::size_t SimulatedLine::drop_if(const std::function<bool(const Message&)>& pick) {
  const auto old = pending_.size();
  std::erase_if(pending_, pick);
  return old - pending_.size();
}

SimulatedLine::RunStats SimulatedLine::run(Delivery delivery, std::uint64_t seed, double drop_rate) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution lost(drop_rate);
  RunStats stats;
  std::size_t head = 0;  // in_order: pending_[head..] is the queue; compacted when drained
  auto deliver_one = [&] {
    Message m;
    if (delivery == Delivery::in_order) {
      m = pending_[head++];
    } else {
      const std::size_t k = std::uniform_int_distribution<std::size_t>(0, pending_.size() - 1)(rng);
      m = pending_[k];
      pending_[k] = pending_.back();
      pending_.pop_back();
    }
    if (drop_rate > 0 && lost(rng)) {
      ++stats.dropped;
    } else {
      deliver(m);
    }
    if (head == pending_.size()) {
      pending_.clear();
      head = 0;
    }
  };
  std::vector<std::uint32_t> order(peers());
  for (std::uint32_t i = 0; i < peers(); ++i) order[i] = i;
  std::size_t next = 0;
  if (delivery == Delivery::shuffled) {
    std::shuffle(order.begin(), order.end(), rng);
  } else {
    for (; next < order.size(); ++next) scatter(order[next]);
  }
  std::bernoulli_distribution start_now(0.2);
  // Peers start while others' messages are already arriving, so some come before their start.
  while (next < order.size() || head < pending_.size()) {
    if (next < order.size() && (head == pending_.size() || start_now(rng))) {
      scatter(order[next++]);
    } else {
      deliver_one();
    }
  }
  stats.complete_before_deadline = all_complete();
  deadline_all();
  while (head < pending_.size()) deliver_one();
  stats.complete_before_finish = all_complete();
  finish_all();
  while (head < pending_.size()) deliver_one();
  return stats;
}

bool SimulatedLine::all_complete() const {
  return std::all_of(rounds_.begin(), rounds_.end(), [](const Round& r) { return r.complete(); });
}

float SimulatedLine::expected_mean(std::uint32_t c, std::size_t index) const {
  const auto& from = contributors_[c];
  if (from.empty()) throw std::logic_error("expected_mean: chunk has no contributors");
  double sum = 0;
  for (std::uint32_t i : from) sum += rounds_[i].send_buffer()[index];
  return static_cast<float>(sum / static_cast<double>(from.size()));
}

void SimulatedLine::queue(std::uint32_t from, std::span<const Send> sends) {
  for (const Send& s : sends) pending_.push_back({from, s});
}

float mean_held(const Round& round, std::size_t index) {
  const float held = round.result()[index];
  if (!round.delta(round.partition().chunk_containing(index))) return held;
  return round.send_buffer()[index] + held;
}

std::vector<float> means_held(const Round& round) {
  std::vector<float> means(round.partition().model_floats());
  for (std::size_t t = 0; t < means.size(); ++t) means[t] = mean_held(round, t);
  return means;
}

}  // namespace gridtrain::allreduce::testing
