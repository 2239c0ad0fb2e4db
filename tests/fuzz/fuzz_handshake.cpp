// The handshake decoders, which read what a stranger sends first (the gate in front of CAF, and the data plane's
// acceptor): the first byte picks the message, the rest is its bytes.
#include <algorithm>
#include <array>

#include "dataplane/handshake.hpp"
#include "fuzz_target.hpp"

namespace {

template <std::size_t N, class Decode>
void decode_padded(std::span<const std::byte> in, Decode decode) {
  std::array<std::byte, N> message{};
  std::copy_n(in.begin(), std::min(N, in.size()), message.begin());
  (void)decode(std::span<const std::byte, N>(message));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gridtrain::dataplane;
  if (size == 0) return 0;
  const auto in = gridtrain::fuzz::bytes(data + 1, size - 1);
  switch (data[0] % 4) {
    case 0: decode_padded<kHelloBytes>(in, [](auto m) { return decode_hello(m); }); break;
    case 1: decode_padded<kChallengeBytes>(in, [](auto m) { return decode_challenge(m); }); break;
    case 2: decode_padded<kProofBytes>(in, [](auto m) { return decode_proof(m); }); break;
    default: decode_padded<kVerdictBytes>(in, [](auto m) { return decode_verdict(m); }); break;
  }
  return 0;
}
