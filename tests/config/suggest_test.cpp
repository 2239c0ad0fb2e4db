#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "config/suggest.hpp"

using gridtrain::config::closest;
using gridtrain::config::edit_distance;

TEST_CASE("edit distance counts insertions, deletions, substitutions and adjacent swaps") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("dims", "dims") == 0);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("dims", "dim") == 1);
  CHECK(edit_distance("dims", "dimz") == 1);
  CHECK(edit_distance("reduce_treshold", "reduce_threshold") == 1);
  CHECK(edit_distance("thershold", "threshold") == 1);  // one swap, not two substitutions
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("abc", "cba") == 2);
}

TEST_CASE("the closest candidate is suggested only when it is a likely misspelling") {
  const std::vector<std::string> keys{"reduce_threshold", "complete_threshold", "elastic_rate", "dims"};
  CHECK(closest("reduce_treshold", keys) == "reduce_threshold");
  CHECK(closest("elastic_rat", keys) == "elastic_rate");
  CHECK(closest("DIMS", keys) == "dims");  // case alone never hides a key
  CHECK(closest("dimz", keys) == "dims");
  CHECK(closest("elastic", keys) == "elastic_rate");  // cut short
  CHECK(closest("dimsx", keys) == "dims");
  CHECK(closest("warning", {"trace", "info", "warn"}) == "warn");  // run on
  CHECK_FALSE(closest("di", keys).has_value());  // too short a prefix to mean anything
  CHECK_FALSE(closest("batch", keys).has_value());
  CHECK_FALSE(closest("xy", keys).has_value());
  CHECK_FALSE(closest("anything", {}).has_value());
}
