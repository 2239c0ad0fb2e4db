#pragma once
// REQUIRE_OK(result): fails the test with the carried error's text when `result` is not ok.
//
// Not REQUIRE_MESSAGE(r.ok(), r.error().to_string()): doctest builds the message of a passing check too when
// run with -s, and error() of an ok Result aborts (base/result.hpp).

#include <doctest/doctest.h>

#define REQUIRE_OK(result)                                                     \
  do {                                                                         \
    const auto& require_ok_result_ = (result);                                 \
    if (!require_ok_result_.ok()) FAIL(require_ok_result_.error().to_string()); \
  } while (false)
