#include "base/range.hpp"

#include <array>
#include <charconv>
#include <cmath>

namespace gridtrain {

bool IntRange::states_min() const { return min > std::numeric_limits<int>::min(); }
bool IntRange::states_max() const { return max < std::numeric_limits<int>::max(); }

std::string IntRange::describe() const {
  if (!states_min() && !states_max()) return "";
  if (!states_max()) return ">= " + std::to_string(min);
  if (!states_min()) return "<= " + std::to_string(max);
  return "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

bool NumberRange::contains(double x) const {
  const bool above = min_open ? x > min : x >= min;
  const bool below = max_open ? x < max : x <= max;
  return above && below;
}

std::string NumberRange::describe() const {
  const bool no_min = std::isinf(min);
  const bool no_max = std::isinf(max);
  if (no_min && no_max) return "";
  if (no_max) return (min_open ? "> " : ">= ") + format_number(min);
  if (no_min) return (max_open ? "< " : "<= ") + format_number(max);
  return std::string("in ") + (min_open ? "(" : "[") + format_number(min) + ", " + format_number(max) +
         (max_open ? ")" : "]");
}

std::string format_number(double x) {
  std::array<char, 64> buf{};
  const auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), x);
  return std::string(buf.data(), end);
}

}  // namespace gridtrain
