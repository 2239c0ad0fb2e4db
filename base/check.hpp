#pragma once
// Preconditions checked in every build, not only under assert(). A violated one (a caller that broke a
// REQUIRES) is a programming error, not an input error: no caller could handle it, so it is no Error value and
// no exception either. It prints what was violated and aborts, as a Result accessed against its state does
// (base/result.hpp).
//
// Header-only, so that code which links no gridtrain library (the CUDA module) can use it too.

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace gridtrain {

// Prints "gridtrain: precondition violated: <what>" on stderr and aborts.
[[noreturn]] inline void precondition_violated(std::string_view what) {
  std::fprintf(stderr, "gridtrain: precondition violated: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

}  // namespace gridtrain

#define GRIDTRAIN_CHECK_STRING_(x) #x
#define GRIDTRAIN_CHECK_LINE_(x) GRIDTRAIN_CHECK_STRING_(x)
// A REQUIRES checked in every build (where assert() would vanish under NDEBUG): aborts through
// precondition_violated with the condition, its file and its line.
#define GRIDTRAIN_REQUIRE(condition)                                                                        \
  ((condition) ? static_cast<void>(0)                                                                        \
               : ::gridtrain::precondition_violated(#condition " (" __FILE__ ":" GRIDTRAIN_CHECK_LINE_(__LINE__) ")"))
