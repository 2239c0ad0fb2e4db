// The IDX reader (Fashion-MNIST's format, plain or gzip): any file gives an array or an error; it allocates only
// what the header's extents and the file's size both allow.
#include "fuzz_target.hpp"
#include "learner/idx.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  gridtrain::fuzz::MemoryFile file(gridtrain::fuzz::bytes(data, size));
  (void)gridtrain::learner::read_idx(file.path());
  return 0;
}
