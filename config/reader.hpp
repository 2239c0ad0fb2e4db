#pragma once
// Internal to the config library: reads typed values out of yaml-cpp nodes, turning every mismatch into an Error
// that names the source, position and key. One Reader per input (the file, or one --set override).

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <yaml-cpp/yaml.h>

#include "config/enums.hpp"
#include "base/range.hpp"
#include "base/result.hpp"
#include "config/suggest.hpp"

namespace gridtrain::config {

// Where a value was set, for errors found after reading (cross-field checks).
struct Origin {
  std::string source;
  int line = 0;
  int column = 0;
};

// A YAML value with the position to report for it. yaml-cpp marks an empty value (`key:` and nothing) at the
// next token, possibly lines below, so an empty value takes its key's position instead.
struct Value {
  YAML::Node node;
  YAML::Mark mark;
};

// How a value reads in a message: 1.5, "quoted", null, a map, a list.
std::string describe(const YAML::Node& node);

class Reader {
 public:
  // has_marks: whether node positions mean something to the user (not for a --set value, whose positions are
  // inside the override text).
  Reader(std::string source, std::filesystem::path base_dir, bool has_marks);

  const std::string& source() const { return source_; }

  Origin origin(const YAML::Mark& mark) const;
  Error error(const YAML::Mark& at, std::string key, std::string message) const;
  // "expected <what>, found <the value>"
  Error mismatch(const Value& value, const std::string& key, const std::string& what) const;

  // Calls visit(path, key_mark, value) for each entry of `map` in order, path being prefix.name. Rejects keys
  // that are not scalars, and keys given twice (yaml-cpp keeps both; the second would silently win).
  // REQUIRES: map.IsMap()
  using Visit = std::function<Status(const std::string& path, const YAML::Mark& key_mark, const Value& value)>;
  Status entries(const YAML::Node& map, const std::string& prefix, const Visit& visit) const;

  Result<bool> boolean(const Value& v, const std::string& key) const;
  Result<std::int64_t> integer(const Value& v, const std::string& key, const IntRange& range) const;
  Result<std::uint64_t> unsigned64(const Value& v, const std::string& key) const;
  Result<double> number(const Value& v, const std::string& key, const NumberRange& range) const;
  // A scalar's text. A null value reads as "" when allow_empty.
  Result<std::string> string(const Value& v, const std::string& key, bool allow_empty) const;
  // A path, resolved against the base directory unless absolute or empty.
  Result<std::string> path(const Value& v, const std::string& key) const;

  template <NamedEnum E>
  Result<E> enumeration(const Value& v, const std::string& key) const {
    const std::string what = "one of " + enum_choices<E>();
    if (!v.node.IsScalar()) return mismatch(v, key, what);
    if (auto e = parse_enum<E>(v.node.Scalar())) return *e;
    std::vector<std::string> names(std::begin(EnumNames<E>::names), std::end(EnumNames<E>::names));
    Error err = mismatch(v, key, what);
    if (auto near = closest(v.node.Scalar(), names)) err.message += " (did you mean '" + *near + "'?)";
    return err;
  }

  template <NamedEnum E>
  static std::string enum_choices() {
    std::string out;
    for (std::string_view n : EnumNames<E>::names) out += (out.empty() ? "" : "|") + std::string(n);
    return out;
  }

 private:
  // A plain (unquoted) scalar's text, or nullopt for anything else: a number written in quotes is a string.
  static std::optional<std::string> plain_scalar(const YAML::Node& node);

  std::string source_;
  std::filesystem::path base_dir_;
  bool has_marks_;
};

}  // namespace gridtrain::config
