#pragma once
// Errors as values (LevelDB's Status, with a payload): a function that can fail on bad input returns a
// Result<T>, and only the program's edge (main) turns an Error into output. Nothing here is specific to YAML;
// data files and checkpoints report through the same types.

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace gridtrain::config {

// What went wrong and where, in the terms of the input the user wrote.
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

namespace detail {
[[noreturn]] inline void bad_result_access(const Error* error) {
  // A precondition violation, not an input error: report what was carried and stop, rather than throw.
  std::fprintf(stderr, "gridtrain: Result accessed against its state%s%s\n", error ? ": " : "",
               error ? error->to_string().c_str() : "");
  std::abort();
}
}  // namespace detail

// Holds either a T or an Error.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::in_place_index<0>, std::move(value)) {}
  Result(Error error) : state_(std::in_place_index<1>, std::move(error)) {}

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  // REQUIRES: ok()
  T& value() & { return *checked_value(); }
  const T& value() const& { return *checked_value(); }
  T&& value() && { return std::move(*checked_value()); }

  // REQUIRES: !ok()
  const Error& error() const {
    if (const Error* e = std::get_if<1>(&state_)) return *e;
    detail::bad_result_access(nullptr);
  }

 private:
  T* checked_value() {
    if (T* v = std::get_if<0>(&state_)) return v;
    detail::bad_result_access(std::get_if<1>(&state_));
  }
  const T* checked_value() const {
    if (const T* v = std::get_if<0>(&state_)) return v;
    detail::bad_result_access(std::get_if<1>(&state_));
  }

  std::variant<T, Error> state_;
};

// Success carries nothing: Result<void>{} is ok.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)) {}

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }

  // REQUIRES: !ok()
  const Error& error() const {
    if (!error_) detail::bad_result_access(nullptr);
    return *error_;
  }

 private:
  std::optional<Error> error_;
};

using Status = Result<void>;

}  // namespace gridtrain::config
