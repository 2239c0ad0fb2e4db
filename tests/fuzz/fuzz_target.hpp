#pragma once
// A fuzz target: LLVMFuzzerTestOneInput gets arbitrary bytes and must neither crash, nor hang, nor allocate without
// bound, whatever they are. Each fuzz_*.cpp defines one. With libFuzzer (`make fuzz`, clang) they run for minutes;
// in the normal build smoke_main.cpp runs each over its corpus and random mutations of it for a few seconds, in
// `make test`.

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace gridtrain::fuzz {

inline std::span<const std::byte> bytes(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

// A file that holds `bytes` (in memory, memfd), for readers that take a path; closed with the object.
class MemoryFile {
 public:
  explicit MemoryFile(std::span<const std::byte> bytes);
  ~MemoryFile();
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  const char* path() const { return path_; }

 private:
  int fd_ = -1;
  char path_[64] = {};
};

}  // namespace gridtrain::fuzz
