#pragma once
// The run configuration: one YAML file (README.md, "Configuration") read into plain structs, with defaults,
// `--set key=value` overrides and validation. Every C++ field is named after its YAML key. The keys, their types,
// defaults, ranges and docs live in one table (config/schema.cpp); describe_schema() prints it.
// Where a default lives, once: in that table. The one exception is RoundConfig (the section allreduce's round
// settings), whose defaults stay beside its bounds in allreduce/round_config.hpp, since allreduce/ is pure and
// cannot read config/; the table takes them from there. Every other struct here, and every struct that carries a
// setting on (actors' LineSettings, the data plane's LineSpec, the learner's TrainerSetup), holds zero until the
// setting is copied into it: no second default to drift from the first.
//
// Loading rules:
// - An empty file (nothing, only comments, or `null`) is an error: a config that says nothing is more likely a
//   mistake than a wish for all defaults. `{}`, or a file that sets only some keys, gets defaults for the rest;
//   so does a section left empty (`grid:` with nothing under it).
// - Relative paths in a file are resolved against the directory of that file, so a config means the same thing
//   whatever directory the program starts in. Relative paths given with --set are resolved against the current
//   directory, as a shell user expects. The loaded Config holds the resolved paths.
// - Files are checked when loading: the token file, when set, and the four data files when learner.kind is model
//   (not for probe, which reads no data).
// - Errors stop at the first one, in file order and then override order, and name the file, line:column, key,
//   what was expected and what was found.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "allreduce/round_config.hpp"
#include "config/host_port.hpp"
#include "config/enums.hpp"
#include "base/result.hpp"

namespace gridtrain::config {

struct ClusterConfig {
  std::string name;
  std::string token_file;  // "" = no token; else its content is the cluster's shared secret
  // TLS between nodes (dataplane/tls.hpp): all three set, or none (plaintext).
  std::string tls_certificate;
  std::string tls_key;
  std::string tls_ca;
  HostPort listen;         // port 0 = pick a free port
  int data_port = 0;       // the data plane's port, on listen's host; 0 = pick a free port
  int socket_buffer_kb = 0;  // SO_SNDBUF and SO_RCVBUF of each data connection; 0 = the kernel's autotuning
  int data_streams = 1;      // TCP connections to each line peer this node dials
  int heartbeat_ms = 0;
  int connection_timeout_ms = 0;  // > heartbeat_ms

  bool operator==(const ClusterConfig&) const = default;
};

struct GridConfig {
  std::optional<int> dims;  // 1..grid::kMaxDims; nullopt = "auto": the fewest dims whose lines hold <= max_line
  int max_line = 0;
  int rounds_in_flight = 0;  // k in BIDMach; in allreduce::kRoundsInFlightRange

  bool operator==(const GridConfig&) const = default;
};

// The section `allreduce`: the RoundConfig every line of the cluster runs with (its fields, defaults and bounds
// live in allreduce/round_config.hpp), and how often this node's learner lets its lines run a round.
struct AllreduceConfig : allreduce::RoundConfig {
  int every_steps = 0;  // n > 0: one round per n learner steps; 0: paced by cpu_share
  // With every_steps 0: averaging may use this share of the learner's time (learner/cpu_share_pacer.hpp); 1 = rounds
  // back to back.
  double cpu_share = 0;
  // A line restarted within 5 times this many ms of its last restart (a burst of joins) runs no round until it has
  // been unchanged this long (actors/line_master.hpp, "Settling"); 0 = never hold.
  int line_settle_ms = 0;
  // n > 0: the learner goes at most n steps past the last round its lines completed, then waits for one
  // (learner/trainer.hpp, "Bounded staleness"); 0: it never waits.
  int staleness_bound = 0;

  bool operator==(const AllreduceConfig&) const = default;
};

// One layer of the model. Only the fields of its type are meaningful; the others are 0.
struct LayerSpec {
  LayerType type = LayerType::relu;
  int units = 0;    // dense
  int filters = 0;  // conv2d
  int kernel = 0;   // conv2d
  int stride = 0;   // conv2d (default 1), maxpool (default: size)
  int padding = 0;  // conv2d
  int size = 0;     // maxpool

  bool operator==(const LayerSpec&) const = default;
};

struct ModelConfig {
  std::vector<int> input;  // 1..3 extents, each >= 1: (channels, height, width)
  std::vector<LayerSpec> layers;  // non-empty; softmax_cross_entropy last and only there

  bool operator==(const ModelConfig&) const = default;
};

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::momentum;
  double learning_rate = 0;  // > 0
  double momentum = 0;       // [0, 1)
  double weight_decay = 0;   // >= 0
  Schedule schedule = Schedule::constant;
  int step_every_epochs = 0;  // for Schedule::step
  double step_gamma = 0;      // for Schedule::step, in (0, 1]
  NodeScaling scale_with_nodes = NodeScaling::none;  // the rate times 1, N or sqrt(N), N the cluster's size
  double warmup_epochs = 0;  // the scaled rate reached over these first epochs, from the unscaled one; >= 0

  bool operator==(const OptimizerConfig&) const = default;
};

struct LearnerConfig {
  LearnerKind kind = LearnerKind::model;
  int probe_floats = 0;
  std::optional<double> probe_value;  // nullopt = derived from the node id
  Device device = Device::automatic;
  Precision precision = Precision::fp32;
  DataOnDevice data_on_device = DataOnDevice::automatic;
  std::uint64_t seed = 0;
  int batch = 0;
  int epochs = 0;
  int threads = 0;  // BLAS threads; 0 = the library's default
  ModelConfig model;
  OptimizerConfig optimizer;

  bool operator==(const LearnerConfig&) const = default;
};

struct DataConfig {
  std::string train_images;  // IDX files, gzip or plain
  std::string train_labels;
  std::string test_images;
  std::string test_labels;
  ShardMode shard = ShardMode::node;
  ShardMethod shard_method = ShardMethod::contiguous;
  bool normalize = false;

  bool operator==(const DataConfig&) const = default;
};

struct CheckpointConfig {
  std::string dir;  // "" = off
  int every = 0;    // steps; 0 = off

  bool operator==(const CheckpointConfig&) const = default;
};

struct MetricsConfig {
  std::optional<HostPort> listen;  // Prometheus /metrics; nullopt = off ("" in YAML)
  LogFormat log_format = LogFormat::text;
  LogLevel log_level = LogLevel::info;
  std::string csv;  // "" = off

  bool operator==(const MetricsConfig&) const = default;
};

struct Config {
  // The defaults of the schema table (the same as defaults()). The sections' own default constructors give
  // zeros, which are not a valid run; start from a Config.
  Config();

  ClusterConfig cluster;
  GridConfig grid;
  AllreduceConfig allreduce;
  LearnerConfig learner;
  DataConfig data;
  CheckpointConfig checkpoint;
  MetricsConfig metrics;

  bool operator==(const Config&) const = default;
};

// Every key at its default. Not validated: with learner.kind model it names the Fashion-MNIST files of Debian's
// dataset-fashion-mnist package, which load_* checks exist.
Config defaults();

// Reads `path`, applies `overrides` in order ("allreduce.elastic_rate=0.5"; the value is parsed as a YAML
// scalar or flow collection, so "learner.model.input=[1,28,28]" works; a section takes a flow map), validates.
// Errors in an override have source "--set" and name the key.
Result<Config> load_file(const std::string& path, const std::vector<std::string>& overrides = {});

// As load_file, for YAML text held in memory. `source_name` names it in errors; relative paths in it resolve
// against `base_dir`.
Result<Config> load_string(std::string_view yaml, std::string_view source_name,
                           const std::vector<std::string>& overrides = {}, const std::string& base_dir = ".");

// The config as YAML, every key written out. load_string(to_yaml(c), ...) == c for any loaded c.
std::string to_yaml(const Config& config);

// The schema table as text: key, type and range, default, and what it is for; then the layer types.
std::string describe_schema();

}  // namespace gridtrain::config
