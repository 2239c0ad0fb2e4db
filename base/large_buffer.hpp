#pragma once
// Memory for large buffers (the model, a round's buffers), on transparent huge pages where the kernel has them.
//
// A round streams the model, its snapshot and the means through memory every round; at 64 MB each is 16,384 pages
// of 4 KB, and on a virtual machine every TLB miss walks two levels of page tables. So a buffer of 2 MB or more is
// aligned to 2 MB and advised MADV_HUGEPAGE: Linux's default transparent-huge-page mode ("madvise") backs such a
// range with 2 MB pages, and only when asked. A first touch then also faults once per 2 MB rather than 512 times.
// Where there are no huge pages (THP "never", another OS) the advice is refused, silently, and the buffer is an
// ordinary one: nothing depends on it but speed (BENCHMARKS.md, "Huge pages").

#include <cstddef>
#include <new>
#include <vector>

namespace gridtrain {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// `bytes` of uninitialized memory (malloc's), 2 MB aligned and advised for huge pages when bytes >= kHugePageBytes.
// Throws std::bad_alloc. Free it with free_large.
void* allocate_large(std::size_t bytes);
void free_large(void* p) noexcept;

// An allocator over allocate_large, for std::vector.
template <class T>
struct LargeBufferAllocator {
  using value_type = T;
  LargeBufferAllocator() = default;
  template <class U>
  LargeBufferAllocator(const LargeBufferAllocator<U>&) noexcept {}
  static_assert(alignof(T) <= alignof(std::max_align_t), "malloc's alignment is all a small buffer gets");
  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(allocate_large(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t) noexcept { free_large(p); }
  template <class U>
  friend bool operator==(const LargeBufferAllocator&, const LargeBufferAllocator<U>&) noexcept {
    return true;
  }
};

template <class T>
using LargeBuffer = std::vector<T, LargeBufferAllocator<T>>;

}  // namespace gridtrain
