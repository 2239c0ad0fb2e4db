#include "base/large_buffer.hpp"

#include <cstdlib>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace gridtrain {

namespace {

std::size_t huge_page_multiple(std::size_t bytes) {
  return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

}  // namespace

void* allocate_large(std::size_t bytes) {
  if (bytes < kHugePageBytes) {
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  if (bytes > static_cast<std::size_t>(-1) - kHugePageBytes) throw std::bad_alloc();
  const std::size_t size = huge_page_multiple(bytes);
  void* p = std::aligned_alloc(kHugePageBytes, size);
  if (p == nullptr) throw std::bad_alloc();
#if defined(MADV_HUGEPAGE)
  // Refused (EINVAL) where the kernel has no transparent huge pages: the memory is then an ordinary buffer.
  (void)::madvise(p, size, MADV_HUGEPAGE);
#endif
  return p;
}

void free_large(void* p) noexcept { std::free(p); }

}  // namespace gridtrain
