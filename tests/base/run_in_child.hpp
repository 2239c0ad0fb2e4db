#pragma once
// Death tests, which doctest lacks: runs a call in a forked child and tells how the child ended and what it
// wrote on stderr, so that a test can check that a violated precondition aborts, and says why.

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace gridtrain::testing {

struct ChildEnd {
  bool aborted = false;      // SIGABRT ended it
  std::string stderr_text;  // all it wrote there
};

// Runs fn() in a child process, which exits 0 if fn returns (or throws: nothing of the test runs on there).
// REQUIRES: fn uses no doctest assertion (they belong to the parent).
template <class Fn>
ChildEnd run_in_child(Fn&& fn) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::fflush(nullptr);  // else the child would write the parent's buffered output again
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);  // an abort is what is tested: no core file for it
    ::signal(SIGABRT, SIG_DFL);          // not the test framework's crash handler: the abort is expected
    ::close(fds[0]);
    ::dup2(fds[1], STDERR_FILENO);
    try {
      fn();
    } catch (...) {
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  ChildEnd end;
  char buffer[512];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) end.stderr_text.append(buffer, std::size_t(n));
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  end.aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  return end;
}

}  // namespace gridtrain::testing
