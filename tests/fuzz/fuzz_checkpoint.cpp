// The checkpoint reader: any file gives a checkpoint or an error; sizes are checked against the file before any
// allocation.
#include "fuzz_target.hpp"
#include "learner/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  gridtrain::fuzz::MemoryFile file(gridtrain::fuzz::bytes(data, size));
  (void)gridtrain::learner::read_checkpoint(file.path(), 0x1234);
  return 0;
}
