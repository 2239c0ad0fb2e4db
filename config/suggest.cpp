#include "config/suggest.hpp"

#include <algorithm>
#include <cctype>

namespace gridtrain::config {

int edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size();
  const std::size_t m = b.size();
  // Three rolling rows: the swap rule looks two rows back.
  std::vector<int> before(m + 1), previous(m + 1), current(m + 1);
  for (std::size_t j = 0; j <= m; ++j) previous[j] = static_cast<int>(j);
  for (std::size_t i = 1; i <= n; ++i) {
    current[0] = static_cast<int>(i);
    for (std::size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        current[j] = std::min(current[j], before[j - 2] + 1);
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[m];
}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::optional<std::string> closest(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string word_lower = lower(word);
  for (const std::string& c : candidates)
    if (lower(c) == word_lower) return c;
  // One name cut short or run on ("unit", "warning" for "warn"): far in edits, plainly meant.
  for (const std::string& c : candidates) {
    const std::string c_lower = lower(c);
    const auto& shorter = c_lower.size() < word_lower.size() ? c_lower : word_lower;
    const auto& longer = c_lower.size() < word_lower.size() ? word_lower : c_lower;
    if (shorter.size() >= 3 && longer.compare(0, shorter.size(), shorter) == 0) return c;
  }

  const int limit = std::clamp(static_cast<int>(word.size()) / 3, 1, 3);
  std::optional<std::string> best;
  int best_distance = limit + 1;
  for (const std::string& c : candidates) {
    const int d = edit_distance(word_lower, lower(c));
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

}  // namespace gridtrain::config
