#pragma once
// CPU time of threads, by their POSIX CPU clocks: how a node measures what its averaging costs it
// (learner/cpu_share_pacer.hpp). A clock is read with one system call.
//
//   auto clocks = std::make_shared<base::ThreadClocks>();
//   std::thread worker([clocks] { clocks->enter(); work(); clocks->leave(); });
//   clocks->total();  // the CPU time worker used so far, also once it has ended

#include <pthread.h>
#include <time.h>

#include <chrono>
#include <cstddef>
#include <mutex>
#include <vector>

namespace gridtrain::base {

// The CPU time of the thread whose clock this is; 0 if the clock cannot be read (the thread has ended).
std::chrono::nanoseconds thread_cpu(clockid_t clock);

// The CPU time of the calling thread.
std::chrono::nanoseconds this_thread_cpu();

// The CPU time a changing set of threads has used, in all: a thread enters the set itself and leaves it itself,
// before it ends (a clock of an ended thread may name another thread). What a thread used stays counted after it
// leaves, so the total never goes back. Thread-safe.
class ThreadClocks {
 public:
  // The calling thread joins the set (once).
  void enter();
  // The calling thread leaves the set; its CPU time so far stays in total().
  void leave();

  std::chrono::nanoseconds total() const;
  // Threads in the set now.
  std::size_t size() const;

 private:
  struct Member {
    pthread_t thread;
    clockid_t clock;
  };
  mutable std::mutex mutex_;
  std::vector<Member> members_;
  std::chrono::nanoseconds left_{0};  // what the threads that left used
};

}  // namespace gridtrain::base
