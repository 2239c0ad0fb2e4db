// Runs a fuzz target without libFuzzer, for `make test`: every file of the corpus, then random mutations of them
// (bit flips, byte changes, cuts, insertions, splices, and bytes from nowhere) for the given seconds. The random
// sequence is fixed, so a failure repeats; a crash or an abort fails the test. To find the input that did it, set
// GRIDTRAIN_FUZZ_LAST=FILE: each input is written there before it runs (slow), so FILE holds the culprit.
//
//   fuzz_frame CORPUS_DIR SECONDS
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "fuzz_target.hpp"

namespace {

using Input = std::vector<std::uint8_t>;

std::vector<Input> read_corpus(const std::filesystem::path& dir) {
  std::vector<Input> corpus;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());  // a fixed order, so that the random sequence repeats
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    corpus.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return corpus;
}

Input mutate(const std::vector<Input>& corpus, std::mt19937_64& random) {
  auto pick = [&](std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(random() % n); };
  Input x = corpus.empty() ? Input{} : corpus[pick(corpus.size())];
  const int steps = 1 + static_cast<int>(random() % 8);
  for (int s = 0; s < steps; ++s) {
    switch (random() % 7) {
      case 0:
        if (!x.empty()) x[pick(x.size())] ^= static_cast<std::uint8_t>(1u << (random() % 8));
        break;
      case 1:
        if (!x.empty()) x[pick(x.size())] = static_cast<std::uint8_t>(random());
        break;
      case 2: x.resize(pick(x.size() + 1)); break;
      case 3: {
        const std::size_t at = pick(x.size() + 1);
        Input bytes(1 + pick(16));
        for (auto& b : bytes) b = static_cast<std::uint8_t>(random());
        x.insert(x.begin() + static_cast<std::ptrdiff_t>(at), bytes.begin(), bytes.end());
        break;
      }
      case 4:
        if (!corpus.empty()) {
          const Input& other = corpus[pick(corpus.size())];
          const std::size_t from = pick(other.size() + 1);
          x.resize(pick(x.size() + 1));
          x.insert(x.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
        }
        break;
      case 5:  // an interesting integer: 0, all ones, 2^31, 2^40 (little and big endian alike)
        if (x.size() >= 8) {
          const std::uint64_t values[] = {0, ~std::uint64_t{0}, std::uint64_t{1} << 31, std::uint64_t{1} << 40,
                                          0x7fffffff};
          const std::uint64_t v = values[random() % 5];
          const std::size_t at = pick(x.size() - 7);
          for (int b = 0; b < 8; ++b) x[at + b] = static_cast<std::uint8_t>(v >> (8 * b));
        }
        break;
      default: {
        x.resize(pick(512));
        for (auto& b : x) b = static_cast<std::uint8_t>(random());
      }
    }
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR SECONDS\n", argv[0]);
    return 2;
  }
  const std::vector<Input> corpus = read_corpus(argv[1]);
  const double seconds = std::atof(argv[2]);
  std::uint64_t runs = 0;
  const char* last = std::getenv("GRIDTRAIN_FUZZ_LAST");
  auto run = [&](const Input& x) {
    if (last) std::ofstream(last, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(x.data()),
                                                                             static_cast<std::streamsize>(x.size()));
    LLVMFuzzerTestOneInput(x.data(), x.size());
    ++runs;
  };
  for (const Input& x : corpus) run(x);
  std::mt19937_64 random(20261125);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    run(mutate(corpus, random));
  }
  std::fflush(stdout);
  std::printf("%s: %zu corpus inputs, %llu runs in %.1f s, no crash\n", argv[0], corpus.size(),
              static_cast<unsigned long long>(runs), seconds);
  return 0;
}
