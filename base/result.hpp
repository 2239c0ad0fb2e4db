#pragma once
// Result<T>: a T or the Error that kept it from being made. Status: success, or an Error.
//
// Accessing a Result against its state (value() of an error, error() of a value) is a programming error, not an
// input error: it prints what was carried and aborts (base/check.hpp), rather than throw.

#include <optional>
#include <utility>
#include <variant>

#include "base/error.hpp"

namespace gridtrain {

namespace detail {
[[noreturn]] void bad_result_access(const Error* carried);
}  // namespace detail

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

}  // namespace gridtrain
