// How a line's rounds reach the model: a round of two peers run by hand, its update applied through the access.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "allreduce/round.hpp"
#include "binding/store_access.hpp"

namespace gridtrain::binding {
namespace {

std::shared_ptr<learner::ParameterStore> store_of(std::vector<float> values, learner::UpdateMode mode) {
  auto store = std::make_shared<learner::ParameterStore>(
      std::vector<learner::TensorSpec>{{"w", {static_cast<int>(values.size())}}}, mode);
  store->assign(values);
  if (mode == learner::UpdateMode::deferred) store->apply_deferred();
  return store;
}

std::vector<float> read(const dataplane::ModelAccess& model) {
  std::vector<float> out(model.floats);
  model.fetch(0, out);
  return out;
}

// Peers 0 and 1 average `a` and `b` with α = 1 (every peer gets the mean); round 0 of the pair, complete.
struct Message {
  std::uint32_t from;
  allreduce::Send send;
  std::vector<float> data;  // a copy: a Send's data is valid only until the next call on its Round
};

allreduce::Round run_round(const std::vector<float>& a, const std::vector<float>& b) {
  allreduce::RoundConfig config;
  config.elastic_rate = 1;
  const allreduce::RoundKey key{1, 1, 0, 0, 0};
  std::vector<allreduce::Round> rounds;
  rounds.push_back(allreduce::Round::create(key, a.size(), 2, 0, config).value());
  rounds.push_back(allreduce::Round::create(key, b.size(), 2, 1, config).value());
  std::vector<Message> queue;
  auto post = [&](std::uint32_t from, std::span<const allreduce::Send> sends) {
    for (const allreduce::Send& s : sends) queue.push_back({from, s, {s.data.begin(), s.data.end()}});
  };
  std::copy(a.begin(), a.end(), rounds[0].send_buffer().begin());
  std::copy(b.begin(), b.end(), rounds[1].send_buffer().begin());
  post(0, rounds[0].scatter());
  post(1, rounds[1].scatter());
  while (!queue.empty()) {
    Message m = std::move(queue.front());
    queue.erase(queue.begin());
    allreduce::Round& to = rounds[m.send.to];
    if (m.send.kind == allreduce::SendKind::scatter)
      post(m.send.to, to.on_scatter({key, m.from, m.send.offset, m.data}).sends);
    else
      post(m.send.to, to.on_reduced({key, m.from, m.send.offset, m.send.count, m.data,
                                     m.send.kind == allreduce::SendKind::delta})
                          .sends);
  }
  REQUIRE(rounds[0].complete());
  return std::move(rounds[0]);
}

}  // namespace

TEST_CASE("a model updated in place: the round's mean lands in it, and the data plane may fold and send from it") {
  auto store = store_of({1, 2, 3, 4}, learner::UpdateMode::in_place);
  const dataplane::ModelAccess model = store_access(store);
  CHECK(model.floats == 4);
  CHECK(read(model) == std::vector<float>{1, 2, 3, 4});
  CHECK(static_cast<bool>(model.fold));
  CHECK(model.memory.data() != nullptr);
  const allreduce::Round round = run_round({1, 2, 3, 4}, {3, 4, 5, 6});
  model.update(round, 0, 4, 1.0f);
  CHECK(read(model) == std::vector<float>{2, 3, 4, 5});
}

TEST_CASE("a model its owner updates (the PyTorch front end): the mean waits as a pending pull, no fold, no send") {
  auto store = store_of({1, 2, 3, 4}, learner::UpdateMode::deferred);
  const dataplane::ModelAccess model = store_access(store);
  CHECK_FALSE(static_cast<bool>(model.fold));
  CHECK(model.memory.empty());
  const allreduce::Round round = run_round({1, 2, 3, 4}, {3, 4, 5, 6});
  model.update(round, 0, 4, 1.0f);
  std::vector<float> owners(4);
  std::copy(store->arena().begin(), store->arena().end(), owners.begin());
  CHECK(owners == std::vector<float>{1, 2, 3, 4});     // the rounds never write the owner's floats
  CHECK(read(model) == std::vector<float>{2, 3, 4, 5});  // what the next round sends: with the pending pull
  store->apply_deferred();
  std::copy(store->arena().begin(), store->arena().end(), owners.begin());
  CHECK(owners == std::vector<float>{2, 3, 4, 5});
}

}  // namespace gridtrain::binding
