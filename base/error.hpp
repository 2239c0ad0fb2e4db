#pragma once
// Error: what went wrong and where, in the terms of the input the user wrote (a config key, a data file, a
// command-line option, a peer's message). Errors are values (LevelDB's Status, with a payload): a function that
// can fail on bad input returns a Result<T> or a Status (base/result.hpp), and only the program's edge (gridnode's
// commands) turns an Error into output. Every library of gridtrain reports through this one type.

#include <string>
#include <string_view>

namespace gridtrain {

struct Error {
  // Every member has an initializer, so a designated initializer may name only some: Error{.message = "..."}.
  std::string source{};   // file path, "--set" for command-line overrides, or a name such as "<string>"
  int line = 0;           // 1-based; 0 = unknown or not applicable
  int column = 0;         // 1-based; 0 = unknown or not applicable
  std::string key{};      // dotted key path, e.g. "allreduce.reduce_threshold" or "learner.model.layers[2].units"
  std::string message{};  // what was expected and what was found

  // One line, "source:line:column: key: message", leaving out the parts that are empty or 0.
  std::string to_string() const;

  bool operator==(const Error&) const = default;
};

// `text` made fit to quote inside an error message: control characters escaped (\n, \t, \xNN) so the message
// stays one line, and anything past 80 characters cut to "...".
std::string printable(std::string_view text);

}  // namespace gridtrain
