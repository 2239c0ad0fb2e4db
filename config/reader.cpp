#include "config/reader.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <map>

namespace gridtrain::config {

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "null";
    case YAML::NodeType::Sequence:
      return node.size() == 0 ? "an empty list" : "a list of " + std::to_string(node.size());
    case YAML::NodeType::Map:
      return node.size() == 0 ? "an empty map" : "a map";
    case YAML::NodeType::Scalar:
      break;
  }
  if (node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str") return "\"" + printable(node.Scalar()) + "\"";
  if (node.Scalar().empty()) return "an empty string";
  return printable(node.Scalar());
}

Reader::Reader(std::string source, std::filesystem::path base_dir, bool has_marks)
    : source_(std::move(source)), base_dir_(std::move(base_dir)), has_marks_(has_marks) {}

Origin Reader::origin(const YAML::Mark& mark) const {
  if (!has_marks_ || mark.is_null()) return {source_, 0, 0};
  return {source_, mark.line + 1, mark.column + 1};
}

Error Reader::error(const YAML::Mark& at, std::string key, std::string message) const {
  Origin o = origin(at);
  // A YAML key may hold anything, newlines included; the error must stay one line.
  return Error{std::move(o.source), o.line, o.column, printable(key), std::move(message)};
}

Error Reader::mismatch(const Value& value, const std::string& key, const std::string& what) const {
  return error(value.mark, key, "expected " + what + ", found " + describe(value.node));
}

Status Reader::entries(const YAML::Node& map, const std::string& prefix, const Visit& visit) const {
  std::map<std::string, YAML::Mark> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    // Copies: the iterator's operator-> returns a temporary.
    const YAML::Node key = it->first;
    const YAML::Node value = it->second;
    if (!key.IsScalar())
      return error(key.Mark(), prefix, "expected a key name, found " + describe(key) + " as a key");
    const std::string path = prefix.empty() ? key.Scalar() : prefix + "." + key.Scalar();
    if (auto [first, fresh] = seen.emplace(key.Scalar(), key.Mark()); !fresh) {
      const Origin o = origin(first->second);
      return error(key.Mark(), path,
                   o.line > 0 ? "duplicate key (first given at line " + std::to_string(o.line) + ")" : "duplicate key");
    }
    Status st = visit(path, key.Mark(), Value{value, value.IsNull() ? key.Mark() : value.Mark()});
    if (!st.ok()) return st;
  }
  return {};
}

std::optional<std::string> Reader::plain_scalar(const YAML::Node& node) {
  if (!node.IsScalar() || node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str") return std::nullopt;
  return node.Scalar();
}

Result<bool> Reader::boolean(const Value& v, const std::string& key) const {
  // Only YAML 1.2's spellings: yes/no/on/off are strings there (and a classic source of surprises).
  if (auto text = plain_scalar(v.node)) {
    if (*text == "true" || *text == "True" || *text == "TRUE") return true;
    if (*text == "false" || *text == "False" || *text == "FALSE") return false;
  }
  return mismatch(v, key, "true or false");
}

namespace {

// Decimal digits with an optional sign; `negative` says which sign.
std::optional<std::uint64_t> parse_magnitude(std::string_view text, bool& negative) {
  negative = false;
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  if (text.empty() || text.front() == '+' || text.front() == '-') return std::nullopt;
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

bool all_digits(std::string_view text) {
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) text.remove_prefix(1);
  return !text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos;
}

}  // namespace

Result<std::int64_t> Reader::integer(const Value& v, const std::string& key, const IntRange& range) const {
  const std::string range_text = range.describe();
  const std::string what = "an integer" + (range_text.empty() ? "" : " " + range_text);
  // For a value past a bound that describe() leaves unsaid (">= 1" hides the int's maximum), say both bounds.
  const std::string both_bounds =
      "an integer in [" + std::to_string(range.min) + ", " + std::to_string(range.max) + "]";
  auto text = plain_scalar(v.node);
  if (!text) return mismatch(v, key, what);
  bool negative = false;
  auto magnitude = parse_magnitude(*text, negative);
  const auto limit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (!magnitude || *magnitude > limit) return mismatch(v, key, all_digits(*text) ? both_bounds : what);
  const std::int64_t value = negative ? -static_cast<std::int64_t>(*magnitude) : static_cast<std::int64_t>(*magnitude);
  if (value < range.min) return mismatch(v, key, range.states_min() ? what : both_bounds);
  if (value > range.max) return mismatch(v, key, range.states_max() ? what : both_bounds);
  return value;
}

Result<std::uint64_t> Reader::unsigned64(const Value& v, const std::string& key) const {
  const std::string what = "an integer in [0, 18446744073709551615]";
  auto text = plain_scalar(v.node);
  if (!text || !all_digits(*text)) return mismatch(v, key, what);
  bool negative = false;
  auto magnitude = parse_magnitude(*text, negative);
  if (!magnitude || (negative && *magnitude != 0)) return mismatch(v, key, what);
  return *magnitude;
}

Result<double> Reader::number(const Value& v, const std::string& key, const NumberRange& range) const {
  const std::string range_text = range.describe();
  const std::string what = "a number" + (range_text.empty() ? "" : " " + range_text);
  auto text = plain_scalar(v.node);
  if (!text) return mismatch(v, key, what);
  std::string_view digits = *text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  double value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  // from_chars also takes "inf" and "nan"; neither is a setting.
  if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size() || !std::isfinite(value) ||
      !range.contains(value))
    return mismatch(v, key, what);
  return value;
}

Result<std::string> Reader::string(const Value& v, const std::string& key, bool allow_empty) const {
  const std::string what = allow_empty ? "a string" : "a non-empty string";
  if (v.node.IsNull() && allow_empty) return std::string();
  if (!v.node.IsScalar()) return mismatch(v, key, what);
  if (v.node.Scalar().empty() && !allow_empty) return mismatch(v, key, what);
  return v.node.Scalar();
}

Result<std::string> Reader::path(const Value& v, const std::string& key) const {
  auto text = string(v, key, /*allow_empty=*/true);
  if (!text.ok() || text.value().empty()) return text;
  const std::filesystem::path p(text.value());
  if (p.is_absolute()) return p.lexically_normal().string();
  return (base_dir_ / p).lexically_normal().string();
}

}  // namespace gridtrain::config
