#include "config/error.hpp"

namespace gridtrain::config {

std::string Error::to_string() const {
  std::string out = source;
  if (line > 0) {
    if (!out.empty()) out += ':';
    out += std::to_string(line);
    if (column > 0) out += ':' + std::to_string(column);
  }
  for (const std::string* part : {&key, &message}) {
    if (part->empty()) continue;
    if (!out.empty()) out += ": ";
    out += *part;
  }
  return out;
}

}  // namespace gridtrain::config
