// What compressing a chunk costs one core (allreduce/wire_codec.hpp): encode with error feedback and decode, per
// format, over a model-sized vector of floats spread as a small model's are. A round that sends its chunks
// compressed spends this on top of its socket copies; it pays off where the link, not the CPU, bounds the round.
//
//   bench_wire_codec [--floats 16777216] [--repeats 5]
//
// Prints per format the bytes on the wire against fp32's and the median encode and decode rates, in GB/s of fp32
// floats (4 bytes a float), one thread.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "allreduce/wire_codec.hpp"
#include "bench/median.hpp"

using namespace gridtrain;

int main(int argc, char** argv) {
  std::size_t floats = std::size_t{1} << 24;
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--floats") && i + 1 < argc) {
      floats = std::strtoull(argv[++i], nullptr, 10);
    } else if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_wire_codec [--floats N] [--repeats R]\n");
      return 2;
    }
  }
  if (floats == 0 || repeats < 1) {
    std::fprintf(stderr, "error: --floats and --repeats must be at least 1\n");
    return 2;
  }
  std::mt19937 random(1);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> model(floats), residual(floats, 0.0f), decoded(floats);
  for (float& x : model) x = normal(random);
  std::printf("%-6s %12s %10s %14s %14s\n", "format", "bytes", "of fp32", "encode GB/s", "decode GB/s");
  for (auto format : {allreduce::WireFormat::fp32, allreduce::WireFormat::bf16, allreduce::WireFormat::int8}) {
    std::vector<std::byte> wire(allreduce::wire_bytes(format, floats));
    std::vector<double> encode_rates, decode_rates;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      allreduce::encode_wire(format, model, residual, wire);
      const auto t1 = std::chrono::steady_clock::now();
      if (!allreduce::decode_wire(format, wire, decoded).ok()) {
        std::fprintf(stderr, "error: %s did not decode\n", std::string(allreduce::wire_format_name(format)).c_str());
        return 1;
      }
      const auto t2 = std::chrono::steady_clock::now();
      const double bytes = 4.0 * static_cast<double>(floats);
      encode_rates.push_back(bytes / std::chrono::duration<double>(t1 - t0).count() / 1e9);
      decode_rates.push_back(bytes / std::chrono::duration<double>(t2 - t1).count() / 1e9);
    }
    std::printf("%-6s %12zu %10.4f %14.2f %14.2f\n", std::string(allreduce::wire_format_name(format)).c_str(),
                wire.size(), static_cast<double>(wire.size()) / (4.0 * static_cast<double>(floats)),
                bench::median(encode_rates), bench::median(decode_rates));
  }
  return 0;
}
