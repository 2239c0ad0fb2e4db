// A process that only wakes: RATE times a second, to an absolute time (clock_nanosleep), touching no memory unless
// --touch-kb says so. Beside a training loop it tells what a wake-up costs the loop apart from the work a woken
// thread does (bench/pytorch_wake_cost.py).
//
//   bench_wake_load --rate 700 [--touch-kb 0] [--seconds 0]     # 0 seconds: until killed
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "bench_wake_load: %s\nusage: bench_wake_load --rate N [--touch-kb K] [--seconds S]\n", why);
  std::exit(2);
}

double number(const char* flag, const char* text) {
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || value < 0) usage((std::string(flag) + ": expected a number >= 0").c_str());
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  double rate = 0, touch_kb = 0, seconds = 0;
  for (int i = 1; i < argc; ++i) {
    if (i + 1 >= argc) usage((std::string(argv[i]) + ": expected a value").c_str());
    if (std::strcmp(argv[i], "--rate") == 0)
      rate = number("--rate", argv[++i]);
    else if (std::strcmp(argv[i], "--touch-kb") == 0)
      touch_kb = number("--touch-kb", argv[++i]);
    else if (std::strcmp(argv[i], "--seconds") == 0)
      seconds = number("--seconds", argv[++i]);
    else
      usage((std::string("unknown argument ") + argv[i]).c_str());
  }
  if (rate < 1 || rate > 100000) usage("--rate: expected 1 to 100000 wake-ups a second");
  std::vector<unsigned char> memory(static_cast<std::size_t>(touch_kb * 1024), 1);
  const long period_ns = static_cast<long>(1e9 / rate);
  const long wakes = seconds > 0 ? static_cast<long>(seconds * rate) : -1;
  timespec at{};
  clock_gettime(CLOCK_MONOTONIC, &at);
  [[maybe_unused]] volatile unsigned sink = 0;  // keeps the touches
  for (long n = 0; wakes < 0 || n < wakes; ++n) {
    at.tv_nsec += period_ns;
    while (at.tv_nsec >= 1000000000L) {
      at.tv_nsec -= 1000000000L;
      ++at.tv_sec;
    }
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, nullptr);
    for (std::size_t i = 0; i < memory.size(); i += 64) sink = ++memory[i];  // a cache line each
  }
  return 0;
}
