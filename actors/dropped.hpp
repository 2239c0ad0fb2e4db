#pragma once
// Bad peer input is dropped, never trusted and never fatal: each drop is counted, and logged with its reason
// (the first few, then one in a thousand, so a flood of garbage cannot flood the log).

#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace gridtrain::actors {

// Counts one drop in `counter` and maybe logs "<who>: dropped <reason>".
void log_dropped(std::string_view who, std::uint64_t& counter, std::string_view reason);

// Makes a stateful actor drop messages it has no handler for, counted in state.bad_messages, instead of CAF's
// default (print to stderr). A request gets sec::unexpected_message back.
template <class State>
void drop_unexpected(caf::stateful_actor<State>* self) {
  self->set_default_handler([self](caf::scheduled_actor*, caf::message_view& x) -> caf::result<caf::message> {
    log_dropped(State::name, self->state.bad_messages, "an unexpected message " + x.content().stringify());
    return caf::sec::unexpected_message;
  });
}

}  // namespace gridtrain::actors
