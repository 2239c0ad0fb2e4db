// The shape policy: which cube (dimensions and side) the layout keeps for n nodes, by the "Shapes" and
// "Hysteresis" notes in layout.cpp.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "grid/layout.hpp"
#include "grid/layout_internal.hpp"

namespace gridtrain::grid {

using layout_internal::kSaturated;
using layout_internal::power;
using layout_internal::valid;

namespace {

// The smallest side whose cube holds n cells.
int ceil_root(std::uint64_t n, int dims) {
  if (n == 0) return 0;
  auto s = static_cast<std::uint64_t>(std::llround(std::pow(static_cast<double>(n), 1.0 / dims)));
  while (power(s, dims) < n) ++s;
  while (s > 1 && power(s - 1, dims) >= n) --s;
  return static_cast<int>(std::max<std::uint64_t>(s, 1));
}

// Half a layer of the next smaller cube below its capacity; see the "Hysteresis" note in layout.cpp.
std::uint64_t shrink_below(int side, int dims) {
  if (side <= 1) return 0;
  const auto q = static_cast<std::uint64_t>(side - 1);
  return power(q, dims) - power(q, dims - 1) / 2;
}

// ---- shapes (the "Shapes" note in layout.cpp); d >= 2 unless said ----

// The fewest whole layers a cube of side s may have: two, to connect, and half of them, to mix.
std::uint64_t least_whole(int side) { return std::max<std::uint64_t>(2, (static_cast<std::uint64_t>(side) + 1) / 2); }

// The fewest nodes a cube of d dimensions and side s holds.
std::uint64_t fewest(int dims, int side) {
  return std::max(shrink_below(side, dims) + 1, least_whole(side) * power(static_cast<std::uint64_t>(side), dims - 1));
}

std::uint64_t margin(int dims, int side) {
  return std::max<std::uint64_t>(1, power(static_cast<std::uint64_t>(side - 1), dims - 1) / 2);
}

}  // namespace

bool layout_internal::valid(int dims, int side, std::uint64_t n) {
  if (dims == 1) return n >= 1;
  return side >= 2 && n >= fewest(dims, side) && n <= power(static_cast<std::uint64_t>(side), dims);
}

namespace {

// Operations the shape survives from n (valid there); kSaturated for d = 1, which survives any.
std::uint64_t slack(int dims, int side, std::uint64_t n) {
  if (dims == 1) return kSaturated;
  const std::uint64_t cells = power(static_cast<std::uint64_t>(side), dims);
  // Joins beyond a full cube only resize when the next side enters with its full margin.
  const bool grows = fewest(dims, side + 1) + margin(dims, side + 1) <= cells + 1;
  return std::min(n - fewest(dims, side), grows ? kSaturated : cells - n);
}

bool steady(int dims, int side, std::uint64_t n) {
  return valid(dims, side, n) && (dims == 1 || slack(dims, side, n) >= margin(dims, side));
}

bool settled(int dims, int side, std::uint64_t n) {
  return valid(dims, side, n) && (dims == 1 || slack(dims, side, n) >= (margin(dims, side) + 1) / 2);
}

// The smallest side of d dimensions that holds n; d = 1 holds n on n coordinates.
int smallest_side(int dims, std::uint64_t n) { return dims == 1 ? static_cast<int>(n) : ceil_root(n, dims); }

}  // namespace

// The dimensions the policy ranks for n, best first; 1 always comes last or before fewer-than-needed ones.
std::vector<int> Layout::preferences(std::uint64_t n) const {
  std::vector<int> out;
  if (fixed_dims_ != 0) {
    for (int d = fixed_dims_; d >= 1; --d) out.push_back(d);
    return out;
  }
  int least = 1;
  while (least < kMaxDims && n > power(static_cast<std::uint64_t>(max_line_), least)) ++least;
  for (int d = least; d <= kMaxDims; ++d) out.push_back(d);
  for (int d = least - 1; d >= 1; --d) out.push_back(d);
  return out;
}

// Whether the policy keeps these dimensions for n without looking for better ones.
bool Layout::content(int dims, std::uint64_t n) const {
  if (fixed_dims_ != 0) return dims == fixed_dims_;
  const auto m = static_cast<std::uint64_t>(max_line_);
  const bool fits = dims == kMaxDims || n <= power(m, dims);
  return fits && (dims == 1 || n > power(m, dims - 1) / 2);
}

Layout::Shape Layout::shape_for(std::uint64_t n) const {
  if (n == 0) return Shape{1, 0};
  const Shape now{cube_.dims(), cube_.side()};
  const bool now_valid = now.side > 0 && valid(now.dims, now.side, n);
  if (content(now.dims, n)) {
    if (now_valid) return now;
    const Shape resized{now.dims, smallest_side(now.dims, n)};
    if (settled(resized.dims, resized.side, n)) return resized;
  }
  const std::vector<int> ranked = preferences(n);
  for (const int d : ranked) {
    if (d == now.dims) break;
    if (steady(d, smallest_side(d, n), n)) return Shape{d, smallest_side(d, n)};
  }
  if (now_valid) return now;
  for (const int d : ranked) {
    if (settled(d, smallest_side(d, n), n)) return Shape{d, smallest_side(d, n)};
  }
  for (const int d : ranked) {
    if (valid(d, smallest_side(d, n), n)) return Shape{d, smallest_side(d, n)};
  }
  return Shape{1, static_cast<int>(n)};  // not reached: d = 1 is ranked and valid
}

// Why the current shape is not one the policy keeps for n, or "".
std::string Layout::off_policy(std::uint64_t n) const {
  const int d = cube_.dims();
  if (n == 0) return d == 1 && cube_.side() == 0 ? "" : "empty layout with a shape";
  if (d >= 2 && !valid(d, cube_.side(), n)) {
    return "side " + std::to_string(cube_.side()) + " in " + std::to_string(d) + " dimensions is not valid for n = " +
           std::to_string(n);
  }
  if (content(d, n)) return "";
  for (const int better : preferences(n)) {
    if (better == d) break;
    if (steady(better, smallest_side(better, n), n)) {
      return std::to_string(better) + " dimensions are steady for n = " + std::to_string(n) + " but " +
             std::to_string(d) + " are used";
    }
  }
  return "";
}

}  // namespace gridtrain::grid
