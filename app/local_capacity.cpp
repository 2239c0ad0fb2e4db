#include "app/local_capacity.hpp"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace gridtrain::app {

int LocalCapacity::by_memory() const {
  if (available_bytes <= 0) return INT_MAX;
  return static_cast<int>(std::min<long long>(INT_MAX, available_bytes / kBytesPerNode));
}

int LocalCapacity::limit() const { return std::min(by_cores(), by_memory()); }

LocalCapacity local_capacity() {
  LocalCapacity c;
  c.cores = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    std::istringstream in(line);
    std::string key;
    long long kib = 0;
    if (in >> key >> kib && key == "MemAvailable:") c.available_bytes = kib * 1024;
  }
  return c;
}

Status fits_here(const std::string& command, int nodes, const LocalCapacity& capacity) {
  if (nodes <= capacity.limit()) return {};
  std::string why = fmt::format("{} per core on {} cores", kNodesPerCore, capacity.cores);
  if (capacity.by_memory() < capacity.by_cores())
    why = fmt::format("each node takes about {} MB, and {:.1f} GiB of memory are available", kBytesPerNode >> 20,
                      static_cast<double>(capacity.available_bytes) / (1LL << 30));
  return Error{.message = fmt::format("{}: --nodes {} is more than this machine can hold: at most {} ({}); these "
                                      "nodes all run here, so start larger clusters with gridnode run on several "
                                      "machines",
                                      command, nodes, capacity.limit(), why)};
}

}  // namespace gridtrain::app
