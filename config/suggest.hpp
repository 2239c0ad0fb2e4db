#pragma once
// "Did you mean ...?" for misspelled keys and enum values.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gridtrain::config {

// Edit distance counting insertions, deletions, substitutions and swaps of adjacent characters as one edit each
// (optimal string alignment), so "treshold" and "thersholds" stay close to "threshold".
int edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, if it is close enough to be a likely misspelling: a case-insensitive match,
// a prefix of at least 3 characters either way, or at most about one edit per three characters. Ties go to the
// earlier candidate.
std::optional<std::string> closest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace gridtrain::config
