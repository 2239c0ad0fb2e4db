// The edge where an Error becomes output: one line on stderr, and the exit code.

#include <iostream>

#include "app/commands.hpp"

namespace gridtrain::app {

int fail(int code, const std::string& message) {
  std::cerr << "error: " << message << '\n';
  return code;
}

int fail(const Error& error) { return fail(kBadInput, error.to_string()); }

}  // namespace gridtrain::app
