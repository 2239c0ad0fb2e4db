#include "deterministic_system.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "actors/messages.hpp"

namespace gridtrain::testing {

namespace {

// Nobody sends it: a behavior must handle something, or its actor ends at once.
using idle_atom = caf::atom_constant<caf::atom("idle")>;

RecorderState& recorder_state(const caf::actor& recorder) { return state_of<RecorderState>(recorder); }

}  // namespace

caf::behavior recorder(caf::stateful_actor<RecorderState>* self, std::string role) {
  self->state.role = std::move(role);
  self->set_default_handler([self](caf::scheduled_actor*, caf::message_view& x) -> caf::result<caf::message> {
    self->state.received.push_back(x.move_content_to_message());
    // Not a value: CAF would send it to the sender as a reply, and the actor under test would get a message it
    // never asked for.
    return caf::delegated<caf::message>{};
  });
  return {[](idle_atom) {}};
}

DeterministicSystem::Config::Config() {
  set("scheduler.policy", caf::atom("testing"));
  actors::register_message_types(*this);  // an unregistered type would travel EMPTY
}

DeterministicSystem::DeterministicSystem()
    : system_(config_), scheduler_(dynamic_cast<caf::scheduler::test_coordinator&>(system_.scheduler())) {
  spdlog::set_level(spdlog::level::err);  // every drop a test provokes is logged; keep the test output readable
  auto data_plane = dataplane::Service::start({.listen = false, .own_thread = false});
  REQUIRE_MESSAGE(data_plane.ok(), data_plane.error().to_string());
  data_plane_ = std::move(data_plane).value();
  asker_ = recorder("asker");
  run();
}

DeterministicSystem::~DeterministicSystem() {
  for (const caf::actor& actor : spawned_) caf::anon_send_exit(actor, caf::exit_reason::kill);
  for (std::size_t i = 0; i < kMaxEvents && run_one(); ++i) {
  }
  data_plane_->stop();
  // The actor system waits for every actor to end, and no thread would end one spawned past this object.
  if (system_.registry().running() != 0) {
    FAIL_CHECK("actors spawned past DeterministicSystem::spawn still run at its end");
    system_.await_actors_before_shutdown(false);
  }
}

caf::actor DeterministicSystem::recorder(std::string role) {
  return spawn(testing::recorder, std::move(role));
}

bool DeterministicSystem::run_one() {
  auto& jobs = scheduler_.jobs;  // the actors with a message, in line
  if (shuffle_ && jobs.size() > 1) {
    const auto picked = jobs.begin() + static_cast<std::ptrdiff_t>((*shuffle_)() % jobs.size());
    std::rotate(jobs.begin(), picked, picked + 1);
  }
  if (scheduler_.try_run_once()) return true;
  // Rounds move on in the data plane's handlers, which send the actors their events.
  return data_plane_->poll_one() != 0;
}

std::size_t DeterministicSystem::run() {
  std::size_t ran = 0;
  while (ran < kMaxEvents && run_one()) ++ran;
  REQUIRE_MESSAGE(!scheduler_.has_job(), "the actors are still busy after " << ran << " messages");
  return ran;
}

bool DeterministicSystem::run_until(const std::function<bool()>& done, std::size_t max_events,
                                    std::size_t check_every) {
  for (std::size_t i = 0; i < max_events; ++i) {
    if (i % check_every == 0 && done()) return true;
    if (!run_one()) return done();
  }
  return done();
}

std::size_t DeterministicSystem::advance_time(caf::timespan span) { return scheduler_.advance_time(span); }

caf::message DeterministicSystem::ask_message(const caf::actor& to, caf::message question) {
  auto& answers = recorder_state(asker_).received;
  answers.clear();
  caf::send_as(asker_, to, std::move(question));
  REQUIRE_MESSAGE(run_until([&] { return !answers.empty(); }, kMaxEvents), "no answer");
  caf::message answer = std::move(answers.front());
  answers.clear();
  return answer;
}

bool ended(const caf::actor& actor) {
  const auto* a = caf::actor_cast<caf::abstract_actor*>(actor);
  return a->getf(caf::abstract_actor::is_terminated_flag | caf::abstract_actor::is_cleaned_up_flag);
}

std::vector<caf::message>& messages(const caf::actor& recorder) { return recorder_state(recorder).received; }

std::string describe(const caf::actor& recorder) {
  const RecorderState& s = recorder_state(recorder);
  std::string out = s.role + " received " + std::to_string(s.received.size()) + " messages";
  for (const caf::message& m : s.received) out += "\n  " + caf::to_string(m);
  return out;
}

}  // namespace gridtrain::testing
