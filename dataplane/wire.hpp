#pragma once
// Little-endian fields at fixed offsets: how the data plane's headers look on the wire, whatever the host.

#include <cstddef>
#include <cstdint>
#include <span>

namespace gridtrain::dataplane::wire {

template <class T>
void put(std::span<std::byte> out, std::size_t at, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i)
    out[at + i] = static_cast<std::byte>(static_cast<std::uint64_t>(value) >> (8 * i));
}

template <class T>
T get(std::span<const std::byte> in, std::size_t at) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) value |= std::uint64_t{std::to_integer<std::uint8_t>(in[at + i])} << (8 * i);
  return static_cast<T>(value);
}

}  // namespace gridtrain::dataplane::wire
