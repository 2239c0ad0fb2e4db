#pragma once
// Actor tests without threads, sleeps or timeouts: an actor system on CAF's testing scheduler, which runs the
// actors one message at a time when the test says so, and whose clock moves only when the test moves it. Nothing
// runs beside the test, so it may read an actor's state directly; and "recorder" actors, standing in for the peers
// of the actor under test, keep every message they receive for the test to inspect.
// Its data plane (data_plane()) has no thread and no port: in-process nodes reach each other through memory, and
// run() runs its ready work whenever no actor has a message, so rounds run message by message too.
//
//   DeterministicSystem sim;
//   auto line_master = sim.recorder("line master");
//   auto dn = sim.spawn(actors::dimension_node, actors::DimensionNodeSetup{...});
//   caf::anon_send(dn, line);
//   sim.run();                                          // until no actor has a message left
//   CHECK(received<actors::RoundDone>(line_master).size() == 1);
//
// CAF's own test DSL (caf/test/dsl.hpp) is not used: its macros clash with doctest's. Blocking calls cannot work
// here, since no thread would run the actors they wait for: no caf::scoped_actor receives, no actors::NodeHandle.
// The middleman is not loaded: in one process the actors never touch it (direct_connection.cpp returns early for
// a local peer, and a node joins through a seed actor, not an address).

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <doctest/doctest.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "actors/messages.hpp"
#include "dataplane/service.hpp"

namespace gridtrain::testing {

// A recorder's state: its role (for failure messages) and every message it received, in order.
struct RecorderState {
  static inline const char* name = "recorder";
  std::string role;
  std::vector<caf::message> received;
};

// Keeps every message it receives and answers none. Spawn it through DeterministicSystem::recorder().
caf::behavior recorder(caf::stateful_actor<RecorderState>* self, std::string role);

class DeterministicSystem {
 public:
  // A bound on the messages one run() or ask() may take: far more than any test needs, so that reaching it means
  // the actors never fall idle (rounds running freely, say), not that the test was slow.
  static constexpr std::size_t kMaxEvents = 2'000'000;

  DeterministicSystem();
  // Kills every actor spawned through this object (and so the actors linked to them), and runs them down.
  ~DeterministicSystem();
  DeterministicSystem(const DeterministicSystem&) = delete;
  DeterministicSystem& operator=(const DeterministicSystem&) = delete;

  caf::actor_system& system() { return system_; }
  // For finer control than the helpers below give: run_jobs_filtered, prioritize, trigger_timeouts.
  caf::scheduler::test_coordinator& scheduler() { return scheduler_; }
  // The process's data plane, run by run() between messages.
  const std::shared_ptr<dataplane::Service>& data_plane() const { return data_plane_; }

  // Spawns an actor that ends with this object. Its behavior function runs at the first run(): until then its
  // state is default-constructed.
  template <class F, class... Ts>
  caf::actor spawn(F fun, Ts&&... xs) {
    caf::actor actor = system_.spawn(fun, std::forward<Ts>(xs)...);
    spawned_.push_back(actor);
    return actor;
  }
  caf::actor recorder(std::string role);
  // Ends `actor` with this object too, as if spawned through it (one that start_node spawned, say).
  const caf::actor& adopt(const caf::actor& actor) { return spawned_.emplace_back(actor); }

  // From now on, each message is taken from an actor picked at random among those with one (seeded by `seed`), not
  // from the next in line: another interleaving of the actors, the same on every run. What CAF guarantees holds
  // either way: the messages from one actor to another arrive in the order sent.
  void shuffle(std::uint64_t seed) { shuffle_.emplace(seed); }

  // Handles messages until no actor has one left; timers do not fire (see advance_time). Returns how many ran.
  // Fails the test if the actors are still busy after kMaxEvents.
  std::size_t run();
  // Handles one message at a time until `done` holds (true), or `max_events` ran or none is left (false). `done`
  // is asked first, then after every `check_every` messages (a costly condition need not be asked after each).
  bool run_until(const std::function<bool()>& done, std::size_t max_events, std::size_t check_every = 1);
  // Moves the clock on by `span`: the delayed messages and request timeouts now due are delivered (not yet
  // handled: run() does that). Returns how many were.
  std::size_t advance_time(caf::timespan span);

  // Sends `xs` to `to` from a recorder and runs until the answer comes (CAF sends a handler's result back to the
  // sender of a plain message too): the answer. Fails the test if none comes within kMaxEvents, or it is not a T.
  template <class T, class... Ts>
  T ask(const caf::actor& to, Ts&&... xs) {
    caf::message answer = ask_message(to, caf::make_message(std::forward<Ts>(xs)...));
    REQUIRE_MESSAGE(answer.match_elements<T>(), "an unexpected answer: " << caf::to_string(answer));
    return answer.get_as<T>(0);
  }
  caf::message ask_message(const caf::actor& to, caf::message question);

 private:
  bool run_one();  // false: no actor has a message and the data plane has nothing ready

  struct Config : caf::actor_system_config {
    Config();
  };

  Config config_;  // outlives system_
  caf::actor_system system_;
  caf::scheduler::test_coordinator& scheduler_;
  std::vector<caf::actor> spawned_;
  caf::actor asker_;
  std::optional<std::mt19937_64> shuffle_;
  std::shared_ptr<dataplane::Service> data_plane_;
};

// Whether the actor has ended. Its state is gone then.
bool ended(const caf::actor& actor);

// The state of a live stateful actor, read directly: safe, since nothing runs while the test does.
template <class State>
State& state_of(const caf::actor& actor) {
  // FAIL, not REQUIRE: conditions read states after every message, and each REQUIRE would count as an assertion.
  auto* stateful = dynamic_cast<caf::stateful_actor<State>*>(caf::actor_cast<caf::abstract_actor*>(actor));
  if (stateful == nullptr) FAIL("not an actor with that state");
  if (ended(actor)) FAIL("the actor has ended: its state is gone");
  return stateful->state;
}

// Everything the recorder received, in order.
std::vector<caf::message>& messages(const caf::actor& recorder);
// The recorder's messages, one a line, for a failure message.
std::string describe(const caf::actor& recorder);

// Every message the recorder received that is one T, in order.
template <class T>
std::vector<T> received(const caf::actor& recorder) {
  std::vector<T> out;
  for (const caf::message& m : messages(recorder))
    if (m.match_elements<T>()) out.push_back(m.get_as<T>(0));
  return out;
}

// received<T>(), and those messages removed from the recorder.
template <class T>
std::vector<T> take(const caf::actor& recorder) {
  std::vector<T> out = received<T>(recorder);
  std::erase_if(messages(recorder), [](const caf::message& m) { return m.match_elements<T>(); });
  return out;
}

}  // namespace gridtrain::testing

// How doctest prints the values tests compare most, when a comparison fails.
template <>
struct doctest::StringMaker<gridtrain::allreduce::RoundKey> {
  static String convert(const gridtrain::allreduce::RoundKey& x) { return caf::deep_to_string(x).c_str(); }
};
template <>
struct doctest::StringMaker<gridtrain::actors::RoundStats> {
  static String convert(const gridtrain::actors::RoundStats& x) { return caf::deep_to_string(x).c_str(); }
};
