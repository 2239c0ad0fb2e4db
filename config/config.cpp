#include "config/config.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include "config/reader.hpp"
#include "config/schema.hpp"
#include "config/suggest.hpp"

namespace gridtrain::config {

namespace fs = std::filesystem;

Config::Config() {
  for (const auto& key : Schema::get().keys()) key->set_default(*this);
}

Config defaults() { return Config(); }

namespace {

// A config being read: the values so far, and where each key was last set (cross-field checks run after the
// overrides, and must still point at the line the user wrote).
struct LoadState {
  Config config;
  std::map<std::string, Origin> origins;
};

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::string sections_text() { return "a map of sections (" + join(Schema::get().children("")) + ")"; }

std::string unknown_key_message(const std::string& path) {
  const Schema& schema = Schema::get();
  const auto dot = path.rfind('.');
  const std::string parent = dot == std::string::npos ? "" : path.substr(0, dot);
  const std::string name = dot == std::string::npos ? path : path.substr(dot + 1);
  const bool parent_known = schema.is_section(parent);
  auto did_you_mean = [](const std::string& p) { return "unknown key; did you mean '" + p + "'?"; };

  if (parent_known)
    if (auto near = closest(name, schema.children(parent)))
      return did_you_mean(parent.empty() ? *near : parent + "." + *near);
  // The right name in the wrong section.
  for (const std::string& p : schema.all_paths())
    if (p.size() > name.size() && p.compare(p.size() - name.size(), name.size(), name) == 0 &&
        p[p.size() - name.size() - 1] == '.')
      return did_you_mean(p);
  if (path.find('[') != std::string::npos)
    return "unknown key; --set replaces a list whole, as in learner.model.layers=[...]";
  // A misspelled section (only --set reaches here: a file is walked one level at a time). By edits alone: a
  // section's name is a prefix of every path under it, so closest()'s prefix rule would always pick a section.
  if (!parent_known) {
    std::string best;
    int best_distance = 3;
    for (const std::string& p : schema.all_paths())
      if (const int d = edit_distance(path, p); d < best_distance) {
        best_distance = d;
        best = p;
      }
    if (!best.empty()) return did_you_mean(best);
  }
  if (parent.empty()) return "unknown section; expected one of " + join(schema.children(""));
  if (parent_known) return "unknown key; " + parent + " takes " + join(schema.children(parent));
  return "unknown key";
}

Status read_at(const std::string& path, const YAML::Mark& key_mark, const Value& value, LoadState& state,
               const Reader& reader);

Status read_section(const std::string& path, const Value& value, LoadState& state, const Reader& reader) {
  if (value.node.IsNull()) return {};  // `grid:` with nothing under it: the section's defaults
  if (!value.node.IsMap()) return reader.mismatch(value, path, "a map");
  return reader.entries(value.node, path, [&](const std::string& p, const YAML::Mark& key_mark, const Value& v) {
    return read_at(p, key_mark, v, state, reader);
  });
}

Status read_at(const std::string& path, const YAML::Mark& key_mark, const Value& value, LoadState& state,
               const Reader& reader) {
  const Schema& schema = Schema::get();
  if (const Key* key = schema.find(path)) {
    Status st = key->read(value, state.config, reader);
    if (st.ok()) state.origins[path] = reader.origin(value.mark);
    return st;
  }
  if (schema.is_section(path)) return read_section(path, value, state, reader);
  return reader.error(key_mark, path, unknown_key_message(path));
}

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return std::string(s.substr(first, last - first + 1));
}

// "key=value": the value is YAML, so lists and maps can be given in flow style.
Status apply_override(const std::string& text, LoadState& state) {
  const std::string source = "--set";
  const auto eq = text.find('=');
  if (eq == std::string::npos) return Error{source, 0, 0, "", "expected key=value, found '" + printable(text) + "'"};
  const std::string key = trim(std::string_view(text).substr(0, eq));
  const std::string value_text = text.substr(eq + 1);
  if (key.empty())
    return Error{source, 0, 0, "", "expected key=value with a key before '=', found '" + printable(text) + "'"};

  YAML::Node node;
  try {
    node = YAML::Load(value_text);
  } catch (const YAML::Exception& e) {
    return Error{source, 0, 0, key,
                 "expected a YAML value after '=', found '" + printable(value_text) + "' (" + e.msg + ")"};
  }
  // Paths on the command line mean what the shell user sees: relative to the current directory.
  std::error_code ec;
  fs::path cwd = fs::current_path(ec);
  const Reader reader(source, ec ? fs::path() : cwd, /*has_marks=*/false);
  return read_at(key, YAML::Mark::null_mark(), Value{node, YAML::Mark::null_mark()}, state, reader);
}

// Why `path` cannot serve as an input file, or "" if it can.
std::string file_problem(const std::string& path, bool must_have_content) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) {
    if (status.type() == fs::file_type::none && ec) return "cannot access " + path + ": " + ec.message();
    return "file not found: " + path;
  }
  if (fs::is_directory(status)) return "expected a file, found a directory: " + path;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) return "cannot read " + path + ": " + std::strerror(errno);
  if (must_have_content && std::fgetc(file.get()) == EOF)
    return "expected a non-empty file, found an empty one: " + path;
  return "";
}

// Checks that span keys, run once all input is read. Errors point at where the blamed key was set, or at the
// config source alone when it kept its default.
Status validate(const LoadState& state, const std::string& source) {
  const Config& c = state.config;
  auto set = [&](const std::string& key) { return state.origins.count(key) > 0; };
  auto at = [&](const std::string& key, std::string message) {
    auto it = state.origins.find(key);
    const Origin o = it != state.origins.end() ? it->second : Origin{source};
    return Error{o.source, o.line, o.column, key, std::move(message)};
  };

  if (c.cluster.connection_timeout_ms <= c.cluster.heartbeat_ms) {
    if (set("cluster.connection_timeout_ms") || !set("cluster.heartbeat_ms"))
      return at("cluster.connection_timeout_ms", "expected more than cluster.heartbeat_ms (" +
                                                     std::to_string(c.cluster.heartbeat_ms) + "), found " +
                                                     std::to_string(c.cluster.connection_timeout_ms));
    return at("cluster.heartbeat_ms", "expected less than cluster.connection_timeout_ms (" +
                                          std::to_string(c.cluster.connection_timeout_ms) + "), found " +
                                          std::to_string(c.cluster.heartbeat_ms));
  }
  // The same check the actors run on every StartLine: the RoundConfig's own.
  if (Status round = allreduce::validate(c.allreduce); !round.ok()) return at(round.error().key, round.error().message);
  // TLS is on with all three files and off with none; one or two set is a mistake, not a wish for plaintext.
  {
    const std::string tls[] = {c.cluster.tls_certificate, c.cluster.tls_key, c.cluster.tls_ca};
    const char* keys[] = {"cluster.tls_certificate", "cluster.tls_key", "cluster.tls_ca"};
    const int given = static_cast<int>(!tls[0].empty()) + !tls[1].empty() + !tls[2].empty();
    if (given != 0 && given != 3) {
      const int blame = !tls[0].empty() ? 0 : !tls[1].empty() ? 1 : 2;  // the first one set
      for (int k = 0; k < 3; ++k)
        if (tls[k].empty())
          return at(keys[blame], std::string("expected ") + keys[k] + " set too (TLS needs a certificate, its key and "
                                 "the cluster CA), found \"\"");
    }
  }
  // The CPU backend has FP32 arithmetic only (OpenBLAS's sgemm; Debian's OpenBLAS is built without its BF16
  // products) and its training set is in host memory anyway. With learner.device auto the backend is chosen at
  // start, and the same refusals come from there (learner/backend_factory.cpp).
  if (c.learner.kind == LearnerKind::model && c.learner.device == Device::cpu) {
    if (c.learner.precision != Precision::fp32)
      return at("learner.precision", "expected fp32 with learner.device cpu, found " +
                                         std::string(to_string(c.learner.precision)) +
                                         ": the CPU backend computes in FP32 only (" +
                                         std::string(to_string(c.learner.precision)) + " needs a GPU)");
    if (c.learner.data_on_device == DataOnDevice::yes)
      return at("learner.data_on_device",
                "expected auto or false with learner.device cpu, found true: the CPU backend has no device memory");
  }
  if (c.checkpoint.every > 0 && c.checkpoint.dir.empty())
    return at("checkpoint.every", "expected 0 (off) while checkpoint.dir is \"\", found " +
                                      std::to_string(c.checkpoint.every));

  for (const auto& key : Schema::get().keys()) {
    const std::string file = key->file(c);
    switch (key->file_rule()) {
      case FileRule::none:
        continue;
      case FileRule::when_set:
        if (file.empty()) continue;
        if (std::string problem = file_problem(file, /*must_have_content=*/true); !problem.empty())
          return at(key->path(), problem);
        break;
      case FileRule::data:
        if (c.learner.kind != LearnerKind::model) continue;  // a probe or an external model reads none
        if (file.empty()) return at(key->path(), "expected a data file (learner.kind is model), found \"\"");
        if (std::string problem = file_problem(file, /*must_have_content=*/false); !problem.empty())
          return at(key->path(), problem);
        break;
    }
  }
  return {};
}

// yaml-cpp 0.7's LoadAll never returns on some malformed streams: it reads endless empty documents, allocating as
// it goes (97 bytes of fuzzed input took 24 GB before the kernel killed the process). So the documents are counted
// first with a parser that builds nothing, and a stream with more than kMaxYamlDocuments is refused.
constexpr int kMaxYamlDocuments = 16;

class DocumentCounter : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Whether `yaml` holds at most `limit` documents. Throws YAML::ParserException as LoadAll would.
bool document_count_within(std::string_view yaml, int limit) {
  std::istringstream stream{std::string(yaml)};
  YAML::Parser parser(stream);
  DocumentCounter counter;
  for (int documents = 0; parser.HandleNextDocument(counter);)
    if (++documents > limit) return false;
  return true;
}

Result<Config> load(std::string_view yaml, const std::string& source, const std::vector<std::string>& overrides,
                    const fs::path& base_dir) {
  std::vector<YAML::Node> documents;
  try {
    if (!document_count_within(yaml, kMaxYamlDocuments))
      return Error{source, 0, 0, "",
                   "invalid YAML: more than " + std::to_string(kMaxYamlDocuments) +
                       " documents (a config is one mapping; yaml-cpp reads some malformed streams as endless empty "
                       "documents)"};
    documents = YAML::LoadAll(std::string(yaml));
  } catch (const YAML::ParserException& e) {
    const int line = e.mark.is_null() ? 0 : e.mark.line + 1;
    const int column = e.mark.is_null() ? 0 : e.mark.column + 1;
    return Error{source, line, column, "", "invalid YAML: " + e.msg};
  }
  // A stray "---" makes an empty document; it says nothing, so it does not count.
  std::erase_if(documents, [](const YAML::Node& d) { return d.IsNull(); });
  if (documents.empty())
    return Error{source, 0, 0, "",
                 "expected " + sections_text() + ", found an empty document (write {} to take every default)"};

  const Reader reader(source, base_dir, /*has_marks=*/true);
  if (documents.size() > 1)
    return reader.error(documents[1].Mark(), "", "expected one YAML document, found a second one");
  const YAML::Node& root = documents[0];
  if (!root.IsMap()) return reader.mismatch(Value{root, root.Mark()}, "", sections_text());

  LoadState state;
  Status st = reader.entries(root, "", [&](const std::string& p, const YAML::Mark& key_mark, const Value& v) {
    return read_at(p, key_mark, v, state, reader);
  });
  if (!st.ok()) return st.error();
  for (const std::string& o : overrides) {
    st = apply_override(o, state);
    if (!st.ok()) return st.error();
  }
  st = validate(state, source);
  if (!st.ok()) return st.error();
  return std::move(state.config);
}

// Errors are values here; nothing thrown below (yaml-cpp, the filesystem, allocation) may escape.
Result<Config> load_guarded(std::string_view yaml, const std::string& source,
                            const std::vector<std::string>& overrides, const fs::path& base_dir) {
  try {
    return load(yaml, source, overrides, base_dir);
  } catch (const YAML::Exception& e) {
    const int line = e.mark.is_null() ? 0 : e.mark.line + 1;
    const int column = e.mark.is_null() ? 0 : e.mark.column + 1;
    return Error{source, line, column, "", e.msg};
  } catch (const std::exception& e) {
    return Error{source, 0, 0, "", std::string("internal error: ") + e.what()};
  }
}

}  // namespace

Result<Config> load_string(std::string_view yaml, std::string_view source_name,
                           const std::vector<std::string>& overrides, const std::string& base_dir) {
  return load_guarded(yaml, std::string(source_name), overrides, fs::path(base_dir));
}

Result<Config> load_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) return Error{path, 0, 0, "", "cannot read the config file: no such file"};
  if (fs::is_directory(status)) return Error{path, 0, 0, "", "expected a config file, found a directory"};

  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) return Error{path, 0, 0, "", std::string("cannot read the config file: ") + std::strerror(errno)};
  std::string text;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0;) text.append(buffer, n);
  if (std::ferror(file.get()))
    return Error{path, 0, 0, "", std::string("cannot read the config file: ") + std::strerror(errno)};

  // Relative paths inside the file resolve against its directory (see config.hpp); made absolute so the
  // loaded Config stays right if the process changes directory.
  fs::path base = fs::absolute(fs::path(path), ec).parent_path();
  if (ec) base = fs::path(path).parent_path();
  return load_guarded(text, path, overrides, base);
}

std::string to_yaml(const Config& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::vector<std::string> open;  // the sections whose maps are open, outermost first
  for (const auto& key : Schema::get().keys()) {
    std::vector<std::string> parts;
    const std::string& path = key->path();
    for (std::size_t start = 0;;) {
      const auto dot = path.find('.', start);
      parts.push_back(path.substr(start, dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    const std::string leaf = parts.back();
    parts.pop_back();
    std::size_t common = 0;
    while (common < open.size() && common < parts.size() && open[common] == parts[common]) ++common;
    for (; open.size() > common; open.pop_back()) out << YAML::EndMap;
    for (; open.size() < parts.size(); open.push_back(parts[open.size()]))
      out << YAML::Key << parts[open.size()] << YAML::Value << YAML::BeginMap;
    out << YAML::Key << leaf << YAML::Value;
    key->write(config, out);
  }
  for (; !open.empty(); open.pop_back()) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string describe_schema() {
  std::string out = "key: type = default\n    what it is for\n\n";
  for (const auto& key : Schema::get().keys())
    out += key->path() + ": " + key->type_text() + " = " + default_text(*key) + "\n    " + key->doc() + "\n";
  out += "\nlayer types (learner.model.layers items):\n" + describe_layer_types();
  return out;
}

}  // namespace gridtrain::config
