#include "base/error.hpp"

#include "base/check.hpp"
#include "base/result.hpp"

namespace gridtrain {

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

std::string printable(std::string_view text) {
  constexpr std::size_t limit = 80;
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < limit; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7f) {
      static const char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > limit) out += "...";
  return out;
}

namespace detail {

void bad_result_access(const Error* carried) {
  const std::string what = carried ? ": " + carried->to_string() : "";
  precondition_violated("a Result accessed against its state" + what);
}

}  // namespace detail

}  // namespace gridtrain
