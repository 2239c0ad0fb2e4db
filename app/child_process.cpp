#include "app/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace gridtrain::app {

namespace {

int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

Result<std::unique_ptr<ChildProcess>> ChildProcess::start(const std::string& exe,
                                                           const std::vector<std::string>& args) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Error{.source = exe, .message = std::string("pipe: ") + std::strerror(errno)};
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    close(fds[0]);
    close(fds[1]);
    return Error{.source = exe, .message = std::string("fork: ") + std::strerror(error)};
  }
  if (pid == 0) {
    // Child: die with the parent, even if it is SIGKILLed.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::unique_ptr<ChildProcess> child(new ChildProcess(pid));
  child->reader_ = std::thread([raw = child.get(), fd = fds[0]] { raw->read_output(fd); });
  return child;
}

ChildProcess::ChildProcess(pid_t pid) : pid_(pid) {}

ChildProcess::~ChildProcess() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    ::kill(pid_, SIGCONT);  // a stopped process must run to die
  }
  wait_exit(std::chrono::seconds(10));
  if (reader_.joinable()) reader_.join();
}

void ChildProcess::read_output(int fd) {
  char buffer[4096];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    std::lock_guard<std::mutex> hold(mutex_);
    output_.append(buffer, static_cast<std::size_t>(n));
    changed_.notify_all();
  }
  ::close(fd);
  std::lock_guard<std::mutex> hold(mutex_);
  output_closed_ = true;
  changed_.notify_all();
}

std::optional<std::string> ChildProcess::wait_for_line(std::string_view needle, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  std::optional<std::string> found;
  changed_.wait_for(lock, timeout, [&] {
    std::size_t start = 0;
    while (start < output_.size()) {
      std::size_t end = output_.find('\n', start);
      if (end == std::string::npos) break;  // only whole lines
      std::string_view line(output_.data() + start, end - start);
      if (line.find(needle) != std::string_view::npos) {
        found = std::string(line);
        return true;
      }
      start = end + 1;
    }
    return output_closed_;
  });
  return found;
}

std::optional<std::string> ChildProcess::next_line(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, timeout,
                    [&] { return output_closed_ || output_.find('\n', next_line_at_) != std::string::npos; });
  std::size_t end = output_.find('\n', next_line_at_);
  if (end == std::string::npos) return std::nullopt;
  std::string line = output_.substr(next_line_at_, end - next_line_at_);
  next_line_at_ = end + 1;
  return line;
}

void ChildProcess::signal(int sig) {
  if (!exit_code_) ::kill(pid_, sig);
}

std::optional<int> ChildProcess::wait_exit(std::chrono::milliseconds timeout) {
  if (exit_code_) return exit_code_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = decode_status(status);
      return exit_code_;
    }
    if (r < 0 && errno != EINTR) return std::nullopt;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool ChildProcess::running() { return !wait_exit(std::chrono::milliseconds(0)).has_value(); }

std::string ChildProcess::output() const {
  std::lock_guard<std::mutex> hold(mutex_);
  return output_;
}

CommandResult run_command(const std::string& exe, const std::vector<std::string>& args,
                          std::chrono::milliseconds timeout) {
  CommandResult result;
  auto started = ChildProcess::start(exe, args);
  if (!started) {
    result.output = "cannot start: " + started.error().to_string();
    return result;
  }
  ChildProcess& child = *started.value();
  if (auto code = child.wait_exit(timeout)) {
    result.exit_code = *code;
  } else {
    child.signal(SIGKILL);
    child.wait_exit(std::chrono::seconds(10));
  }
  child.wait_for_line("\x01never", std::chrono::seconds(5));  // drain: returns once output is closed
  result.output = child.output();
  return result;
}

std::string self_exe(const char* argv0) {
  std::error_code ec;
  auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(argv0) : path.string();
}

}  // namespace gridtrain::app
