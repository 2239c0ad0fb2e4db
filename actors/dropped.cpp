#include "actors/dropped.hpp"

#include <spdlog/spdlog.h>

namespace gridtrain::actors {

void log_dropped(std::string_view who, std::uint64_t& counter, std::string_view reason) {
  ++counter;
  if (counter <= 10 || counter % 1000 == 0) spdlog::warn("{}: dropped {} ({} dropped so far)", who, reason, counter);
}

}  // namespace gridtrain::actors
