#pragma once
// The median the benchmarks report: of a copy, the upper one for an even count; 0 for none.

#include <algorithm>
#include <vector>

namespace gridtrain::bench {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace gridtrain::bench
