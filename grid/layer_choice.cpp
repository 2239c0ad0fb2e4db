#include "grid/layer_choice.hpp"

#include <algorithm>
#include <numeric>

#include "base/check.hpp"

namespace gridtrain::grid {

bool has_consecutive_pair(const std::vector<char>& whole) {
  const std::size_t s = whole.size();
  for (std::size_t t = 0; s >= 2 && t < s; ++t) {
    if (whole[t] && whole[(t + 1) % s]) return true;
  }
  return false;
}

LayerChoice choose_layers(const std::vector<std::uint64_t>& held, std::uint64_t whole, bool with_partial,
                          bool need_pair) {
  const std::size_t s = held.size();
  GRIDTRAIN_REQUIRE(whole + (with_partial ? 1 : 0) <= s);
  std::vector<std::size_t> order(s);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return held[a] > held[b]; });

  LayerChoice choice;
  choice.whole.assign(s, 0);
  for (std::uint64_t i = 0; i < whole; ++i) choice.whole[order[i]] = 1;
  if (need_pair && whole >= 2 && !has_consecutive_pair(choice.whole)) {
    // The best set with the pair (a, a+1): both, then the best others.
    std::uint64_t best = 0;
    for (std::size_t a = 0; a < s; ++a) {
      std::vector<char> candidate(s, 0);
      candidate[a] = candidate[(a + 1) % s] = 1;
      std::uint64_t count = 2, kept = held[a] + held[(a + 1) % s];
      for (std::size_t i = 0; i < s && count < whole; ++i) {
        if (candidate[order[i]]) continue;
        candidate[order[i]] = 1;
        ++count;
        kept += held[order[i]];
      }
      if (a == 0 || kept > best) {
        best = kept;
        choice.whole = std::move(candidate);
      }
    }
  }
  for (std::size_t i = 0; with_partial && i < s; ++i) {
    if (!choice.whole[order[i]]) {
      choice.partial = static_cast<int>(order[i]);
      break;
    }
  }
  return choice;
}

}  // namespace gridtrain::grid
