#pragma once
// Bounds on a setting's value, stated once where the setting lives and used both to check a value and to say
// in an error what was expected ("expected an integer in [1, 16], found 20").

#include <cstdint>
#include <limits>
#include <string>

namespace gridtrain {

// Inclusive integer bounds.
struct IntRange {
  std::int64_t min = std::numeric_limits<int>::min();
  std::int64_t max = std::numeric_limits<int>::max();

  bool contains(std::int64_t x) const { return x >= min && x <= max; }
  // describe() leaves out a bound that is only the int's own limit.
  bool states_min() const;
  bool states_max() const;
  std::string describe() const;  // ">= 1", "in [1, 6]"
};

// Bounds for a real number, each open or closed; ±infinity for none. NaN is in no range.
struct NumberRange {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false;
  bool max_open = false;

  bool contains(double x) const;
  std::string describe() const;  // "> 0", "in (0, 1]"
};

// The shortest text that reads back as the same double: "0.3", "1", "1e-05".
std::string format_number(double x);

}  // namespace gridtrain
