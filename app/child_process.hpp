#pragma once
// A child process with its output captured, stopped by PID: what `gridnode demo` starts its nodes with, and what
// the multi-process tests start gridnodes with. Every child dies with its parent: the destructor kills and reaps
// it, and the kernel kills it too if the parent itself dies (PR_SET_PDEATHSIG), so neither a failed test nor an
// interrupted demo leaves a gridnode behind.

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <memory>
#include <vector>

#include "base/result.hpp"

namespace gridtrain::app {

class ChildProcess {
 public:
  // Starts `exe` with `args`; its stdout and stderr go, merged, into output(). Error: no pipe or no fork (an exe
  // that cannot be executed is a child that exits with 127).
  static Result<std::unique_ptr<ChildProcess>> start(const std::string& exe, const std::vector<std::string>& args);
  ~ChildProcess();  // SIGKILL and reap, if still running

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // The first output line containing `needle`, waiting up to `timeout` for it.
  std::optional<std::string> wait_for_line(std::string_view needle, std::chrono::milliseconds timeout);

  // The next whole output line not yet returned by next_line, waiting up to `timeout` for one; nullopt if none
  // came (or the output is closed and all of it was read).
  std::optional<std::string> next_line(std::chrono::milliseconds timeout);

  // Sends a signal (SIGKILL, SIGTERM, SIGSTOP, SIGCONT...).
  void signal(int sig);

  // Waits up to `timeout` for the process to end. Returns its exit code, or 128 + signal if a signal ended it.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);

  bool running();

  // Everything it printed so far.
  std::string output() const;

 private:
  explicit ChildProcess(pid_t pid);
  void read_output(int fd);

  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::thread reader_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::string output_;
  bool output_closed_ = false;
  std::size_t next_line_at_ = 0;  // offset in output_ of the first line next_line has not returned
};

struct CommandResult {
  int exit_code = -1;  // 128 + signal if a signal ended it; -1 if it could not start or was killed at the timeout
  std::string output;  // when it could not start: why
};

// This very executable (/proc/self/exe; `argv0` where that cannot be read), so that the processes a command
// starts run the same binary whatever the working directory.
std::string self_exe(const char* argv0);

// Runs a command to completion (killed after `timeout`).
CommandResult run_command(const std::string& exe, const std::vector<std::string>& args,
                          std::chrono::milliseconds timeout);

}  // namespace gridtrain::app
