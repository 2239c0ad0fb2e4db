#pragma once
// Helpers for the multi-process tests: real gridnode processes (app/child_process.hpp) and waiting on
// conditions without timed assertions.

#include <chrono>
#include <thread>

#include "app/child_process.hpp"

namespace gridtrain::testing {

using app::ChildProcess;
using app::CommandResult;
using app::run_command;

// Polls `condition` every 50 ms until it holds or `timeout` passes; returns whether it held. For waiting on a
// cluster's state without timed assertions: the deadline is generous, the check is on behaviour.
template <class Condition>
bool eventually(Condition&& condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace gridtrain::testing
