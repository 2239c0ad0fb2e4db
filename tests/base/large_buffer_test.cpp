#include <doctest/doctest.h>

#include <cstdint>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>

#include "base/large_buffer.hpp"

using gridtrain::kHugePageBytes;
using gridtrain::LargeBuffer;

namespace {

// The kernel's transparent-huge-page mode ("always", "madvise", "never"), or "" where it has none.
std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const auto open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos ? "" : line.substr(open + 1, close - open - 1);
}

// The VmFlags of the mapping of this process that holds `address`, from /proc/self/smaps ("" if none does).
std::string vm_flags_at(const void* address) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-' && line.find(':') > line.find(' ')) {
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

}  // namespace

TEST_CASE("a small large-buffer is an ordinary vector") {
  LargeBuffer<float> small(1000, 1.5f);
  CHECK(small.size() == 1000);
  CHECK(std::accumulate(small.begin(), small.end(), 0.0) == doctest::Approx(1500.0));
  small.resize(10);
  small.shrink_to_fit();
  CHECK(small.size() == 10);
}

TEST_CASE("a buffer of 2 MB or more starts on a huge page's boundary and keeps its values as it grows") {
  LargeBuffer<float> big(kHugePageBytes / sizeof(float) + 3);
  std::iota(big.begin(), big.end(), 0.0f);
  CHECK(reinterpret_cast<std::uintptr_t>(big.data()) % kHugePageBytes == 0);
  big.resize(3 * kHugePageBytes / sizeof(float));
  CHECK(reinterpret_cast<std::uintptr_t>(big.data()) % kHugePageBytes == 0);
  CHECK(big[0] == 0.0f);
  CHECK(big[kHugePageBytes / sizeof(float) + 2] == static_cast<float>(kHugePageBytes / sizeof(float) + 2));
  LargeBuffer<double> copy_of(big.begin(), big.end());  // another element type through the same allocator
  CHECK(copy_of[12345] == 12345.0);
}

TEST_CASE("where the kernel has transparent huge pages, a large buffer is advised for them") {
  const std::string mode = thp_mode();
  if (mode.empty() || mode == "never") {
    MESSAGE("skipped: this kernel offers no transparent huge pages (mode '" << mode << "')");
    return;
  }
  LargeBuffer<float> big(4 * kHugePageBytes / sizeof(float));
  const std::string flags = vm_flags_at(big.data() + big.size() / 2);
  INFO("VmFlags of the buffer's mapping: " << flags);
  REQUIRE(!flags.empty());
  CHECK(flags.find(" hg") != std::string::npos);  // VM_HUGEPAGE: MADV_HUGEPAGE was taken
}
