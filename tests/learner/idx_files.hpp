#pragma once
// Test helpers for the data side: small IDX files made on the spot, and raw file bytes.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "learner/idx.hpp"

namespace gridtrain::learner::testing {

// `count` images of rows x cols; pixel i of the whole file is (i * 7 + 3) % 256, so every byte value occurs.
inline IdxArray make_images(std::uint32_t count, std::uint32_t rows, std::uint32_t cols) {
  IdxArray a{{count, rows, cols}, std::vector<std::uint8_t>(std::size_t{count} * rows * cols)};
  for (std::size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<std::uint8_t>((i * 7 + 3) % 256);
  return a;
}

// `count` labels cycling 0..classes-1.
inline IdxArray make_labels(std::uint32_t count, int classes = 10) {
  IdxArray a{{count}, std::vector<std::uint8_t>(count)};
  for (std::size_t i = 0; i < count; ++i) a.data[i] = static_cast<std::uint8_t>(i % static_cast<std::size_t>(classes));
  return a;
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace gridtrain::learner::testing
