#include "config/schema.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "allreduce/round_config.hpp"
#include "grid/cube.hpp"

namespace gridtrain::config {

// ---- Codecs: how one type of value is described, read and written. A key is a codec plus a field. ----------

namespace {

// A real number as YAML: exact, and with a point or exponent so that a reader sees a real ("1.0", not "1").
std::string real_text(double x) {
  std::string out = format_number(x);
  if (out.find_first_of(".e") == std::string::npos) out += ".0";
  return out;
}

struct BoolCodec {
  using T = bool;
  std::string type_text() const { return "bool"; }
  Result<T> read(const Value& v, const std::string& key, const Reader& r) const { return r.boolean(v, key); }
  void write(T x, YAML::Emitter& out) const { out << (x ? "true" : "false"); }
};

// An integer field of type Int; the range must lie within Int.
template <class Int = int>
struct IntCodec {
  using T = Int;
  // A constructor, not aggregate initialisation: clang before 17 deduces no aggregate's template arguments, and
  // IntCodec{range} must be an int field there too.
  explicit IntCodec(IntRange r) : range(r) {}
  IntRange range;
  std::string type_text() const { return "integer " + range.describe(); }
  Result<T> read(const Value& v, const std::string& key, const Reader& r) const {
    auto x = r.integer(v, key, range);
    if (!x.ok()) return x.error();
    return static_cast<T>(x.value());
  }
  void write(T x, YAML::Emitter& out) const { out << std::to_string(x); }
};

struct Uint64Codec {
  using T = std::uint64_t;
  std::string type_text() const { return "integer in [0, 2^64)"; }
  Result<T> read(const Value& v, const std::string& key, const Reader& r) const { return r.unsigned64(v, key); }
  void write(T x, YAML::Emitter& out) const { out << std::to_string(x); }
};

struct NumberCodec {
  using T = double;
  NumberRange range;
  std::string type_text() const { return "number " + range.describe(); }
  Result<T> read(const Value& v, const std::string& key, const Reader& r) const { return r.number(v, key, range); }
  void write(T x, YAML::Emitter& out) const { out << real_text(x); }
};

struct OptionalNumberCodec {
  using T = std::optional<double>;
  std::string type_text() const { return "number or null"; }
  Result<T> read(const Value& v, const std::string& key, const Reader& r) const {
    if (v.node.IsNull()) return T{};
    auto x = r.number(v, key, {});
    if (!x.ok()) return r.mismatch(v, key, "a number or null");
    return T{x.value()};
  }
  void write(const T& x, YAML::Emitter& out) const {
    if (x) {
      out << real_text(*x);
    } else {
      out << YAML::LowerNull << YAML::Null;
    }
  }
};

struct StringCodec {
  using T = std::string;
  std::string type_text() const { return "non-empty string"; }
  Result<T> read(const Value& v, const std::string& key, const Reader& r) const { return r.string(v, key, false); }
  // Quoted, so that a name such as "true" or "123" reads back as a string.
  void write(const T& x, YAML::Emitter& out) const { out << YAML::DoubleQuoted << x; }
};

struct PathCodec {
  using T = std::string;
  FileRule rule = FileRule::none;
  std::string type_text() const { return "path"; }
  Result<T> read(const Value& v, const std::string& key, const Reader& r) const { return r.path(v, key); }
  void write(const T& x, YAML::Emitter& out) const { out << YAML::DoubleQuoted << x; }
};

struct HostPortCodec {
  using T = HostPort;
  std::string type_text() const { return "host:port"; }
  Result<T> read(const Value& v, const std::string& key, const Reader& r) const {
    auto text = r.string(v, key, true);
    if (!text.ok()) return r.mismatch(v, key, "host:port");
    auto endpoint = parse_host_port(text.value());
    if (!endpoint.ok()) return r.error(v.mark, key, endpoint.error().message);
    return endpoint;
  }
  void write(const T& x, YAML::Emitter& out) const { out << YAML::DoubleQuoted << x.to_string(); }
};

struct OptionalHostPortCodec {
  using T = std::optional<HostPort>;
  std::string type_text() const { return "host:port, or \"\" for off"; }
  Result<T> read(const Value& v, const std::string& key, const Reader& r) const {
    auto text = r.string(v, key, true);
    if (!text.ok()) return r.mismatch(v, key, "host:port or \"\"");
    if (text.value().empty()) return T{};
    auto endpoint = parse_host_port(text.value());
    if (!endpoint.ok()) return r.error(v.mark, key, endpoint.error().message);
    return T{endpoint.value()};
  }
  void write(const T& x, YAML::Emitter& out) const { out << YAML::DoubleQuoted << (x ? x->to_string() : ""); }
};

template <NamedEnum E>
struct EnumCodec {
  using T = E;
  std::string type_text() const { return Reader::enum_choices<E>(); }
  Result<T> read(const Value& v, const std::string& key, const Reader& r) const { return r.enumeration<E>(v, key); }
  void write(T x, YAML::Emitter& out) const { out << std::string(to_string(x)); }
};

// grid.dims: an integer, or "auto" (held as nullopt).
struct DimsCodec {
  using T = std::optional<int>;
  static constexpr IntRange range{1, grid::kMaxDims};
  std::string type_text() const { return "integer " + range.describe() + " or auto"; }
  Result<T> read(const Value& v, const std::string& key, const Reader& r) const {
    if (v.node.IsScalar() && v.node.Scalar() == "auto") return T{};
    auto x = r.integer(v, key, range);
    if (!x.ok()) return r.mismatch(v, key, "an integer " + range.describe() + " or \"auto\"");
    return T{static_cast<int>(x.value())};
  }
  void write(const T& x, YAML::Emitter& out) const { out << (x ? std::to_string(*x) : std::string("auto")); }
};

// learner.model.input: (channels, height, width), or fewer extents.
struct InputCodec {
  using T = std::vector<int>;
  static constexpr IntRange extent{1, std::numeric_limits<int>::max()};
  std::string type_text() const { return "list of 1 to 3 integers >= 1"; }
  Result<T> read(const Value& v, const std::string& key, const Reader& r) const {
    if (!v.node.IsSequence() || v.node.size() < 1 || v.node.size() > 3)
      return r.mismatch(v, key, "a list of 1 to 3 integers >= 1");
    T out;
    for (const YAML::Node& item : v.node) {
      const std::string item_key = key + "[" + std::to_string(out.size()) + "]";
      auto x = r.integer(Value{item, item.IsNull() ? v.mark : item.Mark()}, item_key, extent);
      if (!x.ok()) return x.error();
      out.push_back(static_cast<int>(x.value()));
    }
    return out;
  }
  void write(const T& x, YAML::Emitter& out) const {
    out << YAML::Flow << YAML::BeginSeq;
    for (int e : x) out << std::to_string(e);
    out << YAML::EndSeq;
  }
};

// ---- Layers: their own small table, one row per layer type. ------------------------------------------------

struct LayerParam {
  enum class Fallback { required, value, same_as_size };

  std::string_view name;
  int LayerSpec::*field;
  int min;
  Fallback fallback;
  int value = 0;  // for Fallback::value
};

struct LayerKind {
  LayerType type;
  std::vector<LayerParam> params;
  std::string_view doc;
};

using Fallback = LayerParam::Fallback;

const std::vector<LayerKind>& layer_kinds() {
  // Indexed by LayerType.
  static const std::vector<LayerKind> kinds = {
      {LayerType::dense, {{"units", &LayerSpec::units, 1, Fallback::required}}, "fully connected, `units` outputs"},
      {LayerType::relu, {}, "max(0, x), elementwise"},
      {LayerType::conv2d,
       {{"filters", &LayerSpec::filters, 1, Fallback::required},
        {"kernel", &LayerSpec::kernel, 1, Fallback::required},
        {"stride", &LayerSpec::stride, 1, Fallback::value, 1},
        {"padding", &LayerSpec::padding, 0, Fallback::value, 0}},
       "2-D convolution with a square kernel; stride defaults to 1, padding to 0"},
      {LayerType::maxpool,
       {{"size", &LayerSpec::size, 1, Fallback::required},
        {"stride", &LayerSpec::stride, 1, Fallback::same_as_size}},
       "2-D max pooling over a square window; stride defaults to size"},
      {LayerType::flatten, {}, "(channels, height, width) to one vector"},
      {LayerType::softmax_cross_entropy, {}, "the loss; the last layer, and only there"},
  };
  return kinds;
}

std::string param_list(const LayerKind& kind) {
  std::string out;
  for (const LayerParam& p : kind.params) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

std::string a_layer(LayerType type) {
  return "a " + std::string(to_string(type)) + " layer";
}

struct LayersCodec {
  using T = std::vector<LayerSpec>;
  std::string type_text() const { return "non-empty list of layers (see below)"; }

  Result<T> read(const Value& v, const std::string& key, const Reader& r) const {
    if (!v.node.IsSequence() || v.node.size() == 0) return r.mismatch(v, key, "a non-empty list of layers");
    T layers;
    const std::size_t count = v.node.size();
    for (const YAML::Node& item : v.node) {
      const std::string item_key = key + "[" + std::to_string(layers.size()) + "]";
      const Value item_value{item, item.IsNull() ? v.mark : item.Mark()};
      auto layer = read_layer(item_value, item_key, r);
      if (!layer.ok()) return layer.error();
      if (layer.value().type == LayerType::softmax_cross_entropy && layers.size() + 1 != count)
        return r.error(item_value.mark, item_key,
                       "expected softmax_cross_entropy only as the last layer, found it at index " +
                           std::to_string(layers.size()) + " of " + std::to_string(count));
      if (layer.value().type != LayerType::softmax_cross_entropy && layers.size() + 1 == count)
        return r.error(item_value.mark, item_key,
                       "expected the model to end with softmax_cross_entropy, found " +
                           std::string(to_string(layer.value().type)) + " last");
      layers.push_back(layer.value());
    }
    return layers;
  }

  static Result<LayerSpec> read_layer(const Value& v, const std::string& key, const Reader& r) {
    const std::string types = Reader::enum_choices<LayerType>();
    if (!v.node.IsMap()) return r.mismatch(v, key, "a map with a 'type' key (" + types + ")");

    struct Entry {
      std::string path;
      std::string name;
      YAML::Mark key_mark;
      Value value;
    };
    std::vector<Entry> entries;
    const Entry* type_entry = nullptr;
    Status st = r.entries(v.node, key, [&](const std::string& path, const YAML::Mark& key_mark, const Value& value) {
      entries.push_back({path, path.substr(key.size() + 1), key_mark, value});
      return Status{};
    });
    if (!st.ok()) return st.error();
    for (const Entry& e : entries)
      if (e.name == "type") type_entry = &e;
    if (!type_entry) return r.error(v.mark, key, "expected a 'type' key (" + types + "), found none");
    auto type = r.enumeration<LayerType>(type_entry->value, type_entry->path);
    if (!type.ok()) return type.error();

    const LayerKind& kind = layer_kinds()[static_cast<std::size_t>(type.value())];
    LayerSpec spec;
    spec.type = type.value();
    std::set<std::string_view> given;
    for (const Entry& e : entries) {
      if (e.name == "type") continue;
      const auto param = std::find_if(kind.params.begin(), kind.params.end(),
                                      [&](const LayerParam& p) { return p.name == e.name; });
      if (param == kind.params.end()) return r.error(e.key_mark, e.path, not_a_param(kind, e.name));
      auto x = r.integer(e.value, e.path, IntRange{param->min});
      if (!x.ok()) return x.error();
      spec.*(param->field) = static_cast<int>(x.value());
      given.insert(param->name);
    }
    for (const LayerParam& p : kind.params) {
      if (given.count(p.name)) continue;
      switch (p.fallback) {
        case Fallback::required:
          return r.error(v.mark, key, "expected " + a_layer(kind.type) + " to have '" + std::string(p.name) +
                                          "', found no '" + std::string(p.name) + "'");
        case Fallback::value:
          spec.*(p.field) = p.value;
          break;
        case Fallback::same_as_size:
          spec.*(p.field) = spec.size;
          break;
      }
    }
    return spec;
  }

  // Why `name` is not a key of this layer: it belongs to another type, or is misspelled, or unknown.
  static std::string not_a_param(const LayerKind& kind, const std::string& name) {
    const std::string takes =
        kind.params.empty() ? "no keys besides 'type'" : "'type', " + param_list(kind);
    for (const LayerKind& other : layer_kinds())
      for (const LayerParam& p : other.params)
        if (p.name == name) return a_layer(kind.type) + " takes " + takes + ", not '" + name + "'";
    std::vector<std::string> names{"type"};
    for (const LayerParam& p : kind.params) names.emplace_back(p.name);
    if (auto near = closest(name, names)) return "unknown key; did you mean '" + *near + "'?";
    return "unknown key; " + a_layer(kind.type) + " takes " + takes;
  }

  void write(const T& layers, YAML::Emitter& out) const {
    out << YAML::BeginSeq;
    for (const LayerSpec& layer : layers) {
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "type" << YAML::Value << std::string(to_string(layer.type));
      for (const LayerParam& p : layer_kinds()[static_cast<std::size_t>(layer.type)].params)
        out << YAML::Key << std::string(p.name) << YAML::Value << std::to_string(layer.*(p.field));
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
};

// ---- A key: a codec bound to one field of Config. -----------------------------------------------------------

// Get is a generic lambda returning a reference to the field, for a Config or a const Config.
template <class Codec, class Get>
class FieldKey final : public Key {
 public:
  FieldKey(std::string path, Get get, Codec codec, typename Codec::T fallback, std::string doc)
      : Key(std::move(path), std::move(doc)), get_(get), codec_(std::move(codec)), default_(std::move(fallback)) {}

  std::string type_text() const override { return codec_.type_text(); }
  void set_default(Config& config) const override { get_(config) = default_; }
  Status read(const Value& value, Config& config, const Reader& reader) const override {
    auto x = codec_.read(value, path(), reader);
    if (!x.ok()) return x.error();
    get_(config) = std::move(x).value();
    return {};
  }
  void write(const Config& config, YAML::Emitter& out) const override { codec_.write(get_(config), out); }

  FileRule file_rule() const override {
    if constexpr (std::is_same_v<Codec, PathCodec>) {
      return codec_.rule;
    } else {
      return FileRule::none;
    }
  }
  std::string file(const Config& config) const override {
    if constexpr (std::is_same_v<Codec, PathCodec>) {
      return get_(config);
    } else {
      return {};
    }
  }

 private:
  Get get_;
  Codec codec_;
  typename Codec::T default_;
};

template <class Codec, class Get>
std::unique_ptr<Key> key(std::string path, Get get, Codec codec, typename Codec::T fallback, std::string doc) {
  return std::make_unique<FieldKey<Codec, Get>>(std::move(path), get, std::move(codec), std::move(fallback),
                                                std::move(doc));
}

// FIELD(allreduce, elastic_rate) -> "allreduce.elastic_rate", and the field it names; so each key is spelled once.
#define FIELD(section, name) #section "." #name, [](auto& c) -> auto& { return c.section.name; }

constexpr IntRange at_least(int n) { return IntRange{n}; }
constexpr double infinity = std::numeric_limits<double>::infinity();
constexpr NumberRange unit_interval{0, 1, true, false};  // (0, 1]: the step schedule's factor
constexpr NumberRange fraction_below_one{0, 1, false, true};  // [0, 1)
constexpr NumberRange positive{0, infinity, true, false};  // > 0
constexpr NumberRange non_negative{0, infinity, false, false};  // >= 0

std::vector<LayerSpec> default_layers() {
  // The MLP 784-256-128-10.
  return {{.type = LayerType::dense, .units = 256}, {.type = LayerType::relu},
          {.type = LayerType::dense, .units = 128}, {.type = LayerType::relu},
          {.type = LayerType::dense, .units = 10},  {.type = LayerType::softmax_cross_entropy}};
}

}  // namespace

Schema::Schema() {
  const std::string fmnist = "/usr/share/datasets/fashion-mnist/";
  // The allreduce keys' defaults and bounds are RoundConfig's own (allreduce/round_config.hpp).
  const allreduce::RoundConfig round;
  using allreduce::kFractionRange;
  auto add = [this](std::unique_ptr<Key> k) { keys_.push_back(std::move(k)); };
  // clang-format off
  add(key(FIELD(cluster, name), StringCodec{}, "gridtrain", "the cluster's name, in logs and metrics"));
  add(key(FIELD(cluster, token_file), PathCodec{FileRule::when_set}, "",
          "file whose content is the cluster's shared secret; \"\" = no token"));
  add(key(FIELD(cluster, tls_certificate), PathCodec{FileRule::when_set}, "",
          "PEM certificate of this node, signed by cluster.tls_ca; with tls_key and tls_ca: TLS on every connection "
          "between nodes; \"\" = no TLS"));
  add(key(FIELD(cluster, tls_key), PathCodec{FileRule::when_set}, "",
          "PEM private key of tls_certificate, unencrypted; \"\" = no TLS"));
  add(key(FIELD(cluster, tls_ca), PathCodec{FileRule::when_set}, "",
          "PEM certificate of the cluster CA: a peer must hold a certificate it signed; \"\" = no TLS"));
  add(key(FIELD(cluster, listen), HostPortCodec{}, HostPort{"127.0.0.1", 0},
          "host:port this node listens on and the other nodes dial (so not 0.0.0.0); port 0 = pick a free port"));
  add(key(FIELD(cluster, data_port), IntCodec{IntRange{0, 65535}}, 0,
          "port of this node's data plane (the chunks of allreduce rounds), on the listen host; 0 = pick a free port"));
  add(key(FIELD(cluster, socket_buffer_kb), IntCodec{IntRange{0, 65536}}, 0,
          "send and receive buffer of each data plane connection, in KiB; 0 = the kernel's autotuning (measured "
          "best: BENCHMARKS.md)"));
  add(key(FIELD(cluster, data_streams), IntCodec{IntRange{1, 16}}, 1,
          "TCP connections a node opens to each line peer it dials (the lower node id dials), each chunk of a round "
          "on one of them: more help where one connection cannot fill a long or lossy link (BENCHMARKS.md)"));
  add(key(FIELD(cluster, heartbeat_ms), IntCodec{at_least(1)}, 200, "CAF middleman heartbeat interval"));
  add(key(FIELD(cluster, connection_timeout_ms), IntCodec{at_least(1)}, 1000,
          "a peer silent this long is declared down; > heartbeat_ms"));

  add(key(FIELD(grid, dims), DimsCodec{}, 2,
          "the most dimensions: 1 = all-to-all, 2 = BIDMach's grid, auto = the fewest whose lines hold <= max_line "
          "nodes; fewer while too few nodes fill them for every node to share a line (gridnode status shows the "
          "effective shape)"));
  add(key(FIELD(grid, max_line), IntCodec{at_least(2)}, 16, "with dims auto: the most nodes in one line"));
  add(key(FIELD(grid, rounds_in_flight), IntCodec{allreduce::kRoundsInFlightRange}, 3,
          "k: allreduce rounds in flight per line (BIDMach: 3)"));

  add(key(FIELD(allreduce, reduce_threshold), NumberCodec{kFractionRange}, round.reduce_threshold,
          "θr: a chunk is reduced once ceil(θr·p) peers contributed"));
  add(key(FIELD(allreduce, complete_threshold), NumberCodec{kFractionRange}, round.complete_threshold,
          "θc: a round completes once ceil(θc·C) of its C chunks are in"));
  add(key(FIELD(allreduce, advance_threshold), NumberCodec{kFractionRange}, round.advance_threshold,
          "θa: the LineMaster starts round r+1 once ceil(θa·p) peers finished round r"));
  add(key(FIELD(allreduce, quorum), EnumCodec<QuorumMode>{}, round.quorum,
          "fraction: act at the thresholds; timeout: wait for all until quorum_timeout_ms, then for the thresholds"));
  add(key(FIELD(allreduce, quorum_timeout_ms), IntCodec<std::uint32_t>{allreduce::kQuorumTimeoutRange},
          round.quorum_timeout_ms,
          "the wait of timeout quorum; > 0 when quorum is timeout"));
  add(key(FIELD(allreduce, max_chunk_floats), IntCodec<std::uint32_t>{allreduce::kChunkFloatsRange},
          round.max_chunk_floats,
          "the largest chunk one message carries, in floats"));
  add(key(FIELD(allreduce, elastic_rate), NumberCodec{kFractionRange}, round.elastic_rate,
          "α: after a round, m <- m + α·(mean - fetched); (1 - α)·m + α·mean where the learner left m alone"));
  add(key(FIELD(allreduce, outer), EnumCodec<OuterMode>{}, round.outer,
          "what a node does with a round's mean: elastic (m <- m + α·(mean - fetched)) or nesterov (DiLoCo's outer "
          "step: SGD with Nesterov momentum on outer - mean, then on from the outer parameters)"));
  add(key(FIELD(allreduce, outer_rate), NumberCodec{allreduce::kOuterRateRange}, round.outer_rate,
          "nesterov: η, the outer step's rate (DiLoCo: 0.7); 1 with outer_momentum 0 is plain averaging"));
  add(key(FIELD(allreduce, outer_momentum), NumberCodec{allreduce::kOuterMomentumRange}, round.outer_momentum,
          "nesterov: μ, the outer step's Nesterov momentum (DiLoCo: 0.9)"));
  add(key(FIELD(allreduce, wire), EnumCodec<WireFormat>{}, round.wire,
          "how chunks go on the wire: fp32, bf16 (half the bytes) or int8 (blocks of 2,048 with a scale each, about "
          "a quarter), compressed with error feedback; every node of the cluster must use the same"));
  add(key(FIELD(allreduce, every_steps), IntCodec{at_least(0)}, 0,
          "one round per this many learner steps; 0 = paced by cpu_share"));
  add(key(FIELD(allreduce, cpu_share), NumberCodec{unit_interval}, 0.05,
          "with every_steps 0: averaging (its threads' CPU, its pulls) may use this share of the learner's time, "
          "but a round may start every 2 s of training whatever it used; 1 = rounds back to back"));
  add(key(FIELD(allreduce, line_settle_ms), IntCodec{IntRange{0, 60000}}, 200,
          "a line restarted again within 5 times this runs no round until it is this long unchanged; 0 = never wait"));
  add(key(FIELD(allreduce, staleness_bound), IntCodec{at_least(0)}, 0,
          "a training node that is this many learner steps past the last round its lines completed waits for one "
          "(10 s at most); 0 = never waits: the learner runs at its own speed whatever the links"));

  add(key(FIELD(learner, kind), EnumCodec<LearnerKind>{}, LearnerKind::model,
          "model: train; probe: no training, allreduce probe_floats floats (a cluster health check); external: "
          "the model of the process hosting the node (the PyTorch front end; gridnode run refuses it)"));
  add(key(FIELD(learner, probe_floats), IntCodec{at_least(1)}, 1024, "probe: the length of the vector"));
  add(key(FIELD(learner, probe_value), OptionalNumberCodec{}, std::nullopt,
          "probe: the initial value; null = derived from the node id"));
  add(key(FIELD(learner, device), EnumCodec<Device>{}, Device::automatic,
          "where the learner runs; auto = a GPU if there is one"));
  add(key(FIELD(learner, precision), EnumCodec<Precision>{}, Precision::fp32,
          "the products' arithmetic on a GPU: fp32, tf32 (tensor cores, 10-bit mantissa) or bf16 (BF16 inputs, FP32 "
          "sums and master weights); the CPU computes fp32 only"));
  add(key(FIELD(learner, data_on_device), EnumCodec<DataOnDevice>{}, DataOnDevice::automatic,
          "the training set in GPU memory, minibatches gathered there: auto = when it fits; true refuses to start "
          "where it cannot"));
  add(key(FIELD(learner, seed), Uint64Codec{}, 1, "model initialization seed"));
  add(key(FIELD(learner, batch), IntCodec{at_least(1)}, 64, "minibatch size"));
  add(key(FIELD(learner, epochs), IntCodec{at_least(1)}, 10, "passes over the node's shard"));
  add(key(FIELD(learner, threads), IntCodec{at_least(0)}, 0, "BLAS threads; 0 = the library's default"));
  add(key(FIELD(learner.model, input), InputCodec{}, std::vector<int>{1, 28, 28},
          "input shape: (channels, height, width)"));
  add(key(FIELD(learner.model, layers), LayersCodec{}, default_layers(),
          "the layers in order; the last is softmax_cross_entropy"));
  add(key(FIELD(learner.optimizer, kind), EnumCodec<OptimizerKind>{}, OptimizerKind::momentum, "the update rule"));
  add(key(FIELD(learner.optimizer, learning_rate), NumberCodec{positive}, 0.02,
          "step size (0.02 with cosine: the MLP reaches 0.89 on Fashion-MNIST in 10 epochs)"));
  add(key(FIELD(learner.optimizer, momentum), NumberCodec{fraction_below_one}, 0.9,
          "momentum coefficient (kind momentum)"));
  add(key(FIELD(learner.optimizer, weight_decay), NumberCodec{non_negative}, 0.0001, "L2 penalty coefficient"));
  add(key(FIELD(learner.optimizer, schedule), EnumCodec<Schedule>{}, Schedule::cosine,
          "how the learning rate changes over epochs"));
  add(key(FIELD(learner.optimizer, step_every_epochs), IntCodec{at_least(1)}, 5,
          "step: multiply the rate by step_gamma every this many epochs"));
  add(key(FIELD(learner.optimizer, step_gamma), NumberCodec{unit_interval}, 0.1, "step: the factor"));
  add(key(FIELD(learner.optimizer, scale_with_nodes), EnumCodec<NodeScaling>{}, NodeScaling::none,
          "the learning rate times 1 (none), N (linear) or sqrt(N), N the cluster's members as this node sees them, "
          "applied again when they change"));
  add(key(FIELD(learner.optimizer, warmup_epochs), NumberCodec{non_negative}, 0.0,
          "with scale_with_nodes: the scaled rate is reached linearly over these first epochs, from the unscaled one"));

  add(key(FIELD(data, train_images), PathCodec{FileRule::data}, fmnist + "train-images-idx3-ubyte.gz",
          "IDX images to train on (gzip or plain)"));
  add(key(FIELD(data, train_labels), PathCodec{FileRule::data}, fmnist + "train-labels-idx1-ubyte.gz",
          "IDX labels of train_images"));
  add(key(FIELD(data, test_images), PathCodec{FileRule::data}, fmnist + "t10k-images-idx3-ubyte.gz",
          "IDX images to evaluate on"));
  add(key(FIELD(data, test_labels), PathCodec{FileRule::data}, fmnist + "t10k-labels-idx1-ubyte.gz",
          "IDX labels of test_images"));
  add(key(FIELD(data, shard), EnumCodec<ShardMode>{}, ShardMode::node,
          "node: each node trains on its own shard; none: every node sees all data"));
  add(key(FIELD(data, shard_method), EnumCodec<ShardMethod>{}, ShardMethod::contiguous,
          "contiguous: by index and count; permutation: node-seeded"));
  add(key(FIELD(data, normalize), BoolCodec{}, true,
          "true: standardise pixel/255 with Fashion-MNIST's mean and std; false: pixel/255"));

  add(key(FIELD(checkpoint, dir), PathCodec{FileRule::none}, "",
          "directory for checkpoints (node-NAME.ckpt, see --name); \"\" = off"));
  add(key(FIELD(checkpoint, every), IntCodec{at_least(0)}, 0,
          "learner steps between checkpoints; 0 = off; > 0 needs dir"));

  add(key(FIELD(metrics, listen), OptionalHostPortCodec{}, std::nullopt,
          "host:port of the Prometheus /metrics endpoint; \"\" = off"));
  add(key(FIELD(metrics, log_format), EnumCodec<LogFormat>{}, LogFormat::text, "log line format"));
  add(key(FIELD(metrics, log_level), EnumCodec<LogLevel>{}, LogLevel::info, "the least severe level logged"));
  add(key(FIELD(metrics, csv), PathCodec{FileRule::none}, "",
          "metrics CSV file, a row per epoch; the nodes of a machine may share one; \"\" = off"));
  // clang-format on
}

#undef FIELD

const Schema& Schema::get() {
  static const Schema schema;
  return schema;
}

const Key* Schema::find(std::string_view path) const {
  for (const auto& k : keys_)
    if (k->path() == path) return k.get();
  return nullptr;
}

bool Schema::is_section(std::string_view path) const {
  if (path.empty()) return true;
  for (const auto& k : keys_) {
    const std::string& p = k->path();
    if (p.size() > path.size() && p.compare(0, path.size(), path) == 0 && p[path.size()] == '.') return true;
  }
  return false;
}

std::vector<std::string> Schema::children(std::string_view section) const {
  std::vector<std::string> out;
  const std::size_t skip = section.empty() ? 0 : section.size() + 1;
  for (const auto& k : keys_) {
    const std::string& p = k->path();
    if (!section.empty() && !(p.size() > section.size() && p.compare(0, section.size(), section) == 0 &&
                              p[section.size()] == '.'))
      continue;
    std::string child = p.substr(skip, p.find('.', skip) - skip);
    if (std::find(out.begin(), out.end(), child) == out.end()) out.push_back(std::move(child));
  }
  return out;
}

std::vector<std::string> Schema::all_paths() const {
  std::vector<std::string> out;
  for (const auto& k : keys_) {
    const std::string& p = k->path();
    for (std::size_t dot = p.find('.'); dot != std::string::npos; dot = p.find('.', dot + 1))
      if (std::find(out.begin(), out.end(), p.substr(0, dot)) == out.end()) out.push_back(p.substr(0, dot));
    out.push_back(p);
  }
  return out;
}

std::string default_text(const Key& key) {
  const Config config;  // every key at its default
  YAML::Emitter out;
  out << YAML::Flow;
  key.write(config, out);
  return out.c_str();
}

std::string describe_layer_types() {
  std::string out;
  for (const LayerKind& kind : layer_kinds()) {
    std::string keys = "type";
    for (const LayerParam& p : kind.params) {
      keys += ", " + std::string(p.name) + " (integer >= " + std::to_string(p.min);
      if (p.fallback == Fallback::value) keys += ", default " + std::to_string(p.value);
      if (p.fallback == Fallback::same_as_size) keys += ", default size";
      keys += ")";
    }
    out += "  " + std::string(to_string(kind.type)) + ": " + keys + "\n      " + std::string(kind.doc) + "\n";
  }
  return out;
}

}  // namespace gridtrain::config
