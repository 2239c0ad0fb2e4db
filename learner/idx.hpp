#pragma once
// IDX files: the format of MNIST and Fashion-MNIST. A big-endian header (two zero bytes, an element-type byte, a
// dimension count, then one 32-bit extent per dimension) followed by the elements, row-major. Only unsigned-byte
// elements (type 0x08) are supported: that is what the image and label files hold.
//
// Files may be gzip-compressed or plain; both are read the same way. Reading never trusts the header: the data
// must be exactly as long as the extents say (no truncation, no trailing bytes), and memory is allocated as data
// arrives, so a lying header cannot make the reader allocate more than the file holds.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace gridtrain::learner {

// The content of an IDX file of unsigned bytes.
struct IdxArray {
  std::vector<std::uint32_t> dims;  // extents, outermost first: {count, rows, columns} for images
  std::vector<std::uint8_t> data;   // product of dims elements, row-major
};

enum class IdxCompression { plain, gzip };

// Reads an IDX u8 file, gzip or plain. Errors carry `path` as their source and `key` (the config key that named
// the file, if any), and say what was expected and what was found, with byte offsets into the uncompressed data.
Result<IdxArray> read_idx(const std::string& path, std::string_view key = {});

// Writes `array` as an IDX u8 file (magic 0x0000 08 NN), replacing any file at `path`. For tests and tools.
// REQUIRES: 1 <= dims.size() <= 255; the product of dims == data.size().
Status write_idx(const std::string& path, const IdxArray& array,
                         IdxCompression compression = IdxCompression::plain);

// Asks the kernel for transparent huge pages on [data, data + bytes), before the memory is first touched: filling
// a large fresh buffer is dominated by first-touch page faults (about 10 us per 4 KB page on some machines, half a
// second for Fashion-MNIST's 188 MB of floats), and huge pages make them 512 times fewer. Harmless where the kernel
// declines. Used for the buffers that loading fills.
void prefer_huge_pages(void* data, std::size_t bytes);

}  // namespace gridtrain::learner
