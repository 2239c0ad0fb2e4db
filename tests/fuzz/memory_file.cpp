#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "fuzz_target.hpp"

namespace gridtrain::fuzz {

MemoryFile::MemoryFile(std::span<const std::byte> bytes) {
  fd_ = ::memfd_create("gridtrain-fuzz", MFD_CLOEXEC);
  if (fd_ < 0) std::abort();  // the harness, not the target, failed
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n <= 0) std::abort();
    done += static_cast<std::size_t>(n);
  }
  std::snprintf(path_, sizeof path_, "/proc/self/fd/%d", fd_);
}

MemoryFile::~MemoryFile() { ::close(fd_); }

}  // namespace gridtrain::fuzz
