#pragma once
// Internal to the config library: the schema table. Each row is one key (path, type and range, default, doc) and
// knows how to set its default, read itself from YAML and write itself back. Defaults, unknown-key detection,
// suggestions, to_yaml and describe_schema are all driven from this one table.

#include <memory>
#include <string>
#include <string_view>
#include <vector>
#include <yaml-cpp/yaml.h>

#include "config/config.hpp"
#include "config/reader.hpp"

namespace gridtrain::config {

// Which files a path key names that must exist, checked after all overrides (they may change learner.kind).
enum class FileRule {
  none,    // an output path, or a directory made on demand
  when_set,  // when set: a readable file, not empty (the token, the TLS files)
  data,    // when learner.kind is model: set, and a readable file
};

class Key {
 public:
  Key(std::string path, std::string doc) : path_(std::move(path)), doc_(std::move(doc)) {}
  virtual ~Key() = default;

  const std::string& path() const { return path_; }  // dotted: "allreduce.reduce_threshold"
  const std::string& doc() const { return doc_; }

  virtual std::string type_text() const = 0;  // "number in (0, 1]"
  virtual void set_default(Config& config) const = 0;
  // Reads the value into config, or says what is wrong with it.
  virtual Status read(const Value& value, Config& config, const Reader& reader) const = 0;
  // Emits the value (a YAML::Key has been written).
  virtual void write(const Config& config, YAML::Emitter& out) const = 0;

  virtual FileRule file_rule() const { return FileRule::none; }
  virtual std::string file(const Config&) const { return {}; }  // the path named, for file_rule() != none

 private:
  std::string path_;
  std::string doc_;
};

class Schema {
 public:
  static const Schema& get();

  // In file order: keys sharing a section are contiguous.
  const std::vector<std::unique_ptr<Key>>& keys() const { return keys_; }
  const Key* find(std::string_view path) const;
  // Whether `path` names a map of keys (a section such as "learner.model"), "" being the top level.
  bool is_section(std::string_view path) const;
  // The names one level below a section: children("allreduce") = {"reduce_threshold", ...}.
  std::vector<std::string> children(std::string_view section) const;
  // Every key and section path.
  std::vector<std::string> all_paths() const;

 private:
  Schema();
  std::vector<std::unique_ptr<Key>> keys_;
};

// The default as YAML flow text: "1.0", "[1, 28, 28]".
std::string default_text(const Key& key);

// The layer types and the keys each takes, as text for describe_schema().
std::string describe_layer_types();

}  // namespace gridtrain::config
