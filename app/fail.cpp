// The edge where an Error becomes output: one line on stderr, and the exit code.

#include <cstdio>

#include "app/commands.hpp"

namespace gridtrain::app {

int fail(int code, const std::string& message) {
  // One fwrite of the whole line: stderr's lock keeps it whole beside the log lines other threads write there
  // (piece by piece, a log line once landed between "error: " and the message).
  const std::string line = "error: " + message + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  return code;
}

int fail(const Error& error) { return fail(kBadInput, error.to_string()); }

}  // namespace gridtrain::app
