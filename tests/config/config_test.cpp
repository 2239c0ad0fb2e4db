// Good configs: defaults, round trips, overrides and path resolution.

#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "tests/config/temp_dir.hpp"
#include "tests/base/require_ok.hpp"

namespace {

using namespace gridtrain::config;
using gridtrain::config::testing::ScopedCwd;
using gridtrain::config::testing::TempDir;

// The config, or a failed check that shows the error.
Config must_load(std::string_view yaml, const std::vector<std::string>& overrides = {},
                 const std::string& base_dir = ".") {
  auto r = load_string(yaml, "test.yaml", overrides, base_dir);
  REQUIRE_OK(r);
  return r.value();
}

// Four small files standing in for the IDX data, so that learner.kind model loads without the real data set.
struct DataFiles {
  TempDir dir;
  DataFiles() {
    for (const char* name : {"train-images", "train-labels", "test-images", "test-labels"}) dir.write(name, "idx");
  }
  std::vector<std::string> overrides() const {
    std::vector<std::string> out;
    for (const char* key : {"train_images", "train_labels", "test_images", "test_labels"}) {
      std::string name = key;
      name.replace(name.find('_'), 1, "-");
      out.push_back("data." + std::string(key) + "=" + (dir.path() / name).string());
    }
    return out;
  }
};

}  // namespace

TEST_CASE("defaults are the schema's documented values") {
  const Config c = defaults();
  CHECK(c == Config{});
  CHECK(c.cluster.name == "gridtrain");
  CHECK(c.cluster.token_file.empty());
  CHECK(c.cluster.listen == HostPort{"127.0.0.1", 0});
  CHECK(c.cluster.heartbeat_ms == 200);
  CHECK(c.cluster.connection_timeout_ms == 1000);
  CHECK(c.grid.dims == 2);
  CHECK(c.grid.max_line == 16);
  CHECK(c.grid.rounds_in_flight == 3);
  CHECK(c.allreduce.reduce_threshold == 0.5);
  CHECK(c.allreduce.complete_threshold == 0.5);
  CHECK(c.allreduce.advance_threshold == 0.5);
  CHECK(c.allreduce.quorum == QuorumMode::timeout);
  CHECK(c.allreduce.quorum_timeout_ms == 200);
  CHECK(c.allreduce.max_chunk_floats == 262144);
  CHECK(c.allreduce.elastic_rate == 0.3);
  CHECK(c.allreduce.every_steps == 0);
  CHECK(c.allreduce.cpu_share == 0.05);
  CHECK(c.allreduce.line_settle_ms == 200);
  CHECK(c.learner.kind == LearnerKind::model);
  CHECK(c.learner.probe_floats == 1024);
  CHECK_FALSE(c.learner.probe_value.has_value());
  CHECK(c.learner.device == Device::automatic);
  CHECK(c.learner.precision == Precision::fp32);
  CHECK(c.learner.data_on_device == DataOnDevice::automatic);
  CHECK(c.learner.seed == 1);
  CHECK(c.learner.batch == 64);
  CHECK(c.learner.epochs == 10);
  CHECK(c.learner.threads == 0);
  CHECK(c.learner.model.input == std::vector<int>{1, 28, 28});
  const std::vector<LayerSpec> mlp{{.type = LayerType::dense, .units = 256}, {.type = LayerType::relu},
                                   {.type = LayerType::dense, .units = 128}, {.type = LayerType::relu},
                                   {.type = LayerType::dense, .units = 10},
                                   {.type = LayerType::softmax_cross_entropy}};
  CHECK(c.learner.model.layers == mlp);
  CHECK(c.learner.optimizer.kind == OptimizerKind::momentum);
  CHECK(c.learner.optimizer.learning_rate == 0.02);
  CHECK(c.learner.optimizer.momentum == 0.9);
  CHECK(c.learner.optimizer.weight_decay == 0.0001);
  CHECK(c.learner.optimizer.schedule == Schedule::cosine);
  CHECK(c.learner.optimizer.step_every_epochs == 5);
  CHECK(c.learner.optimizer.step_gamma == 0.1);
  CHECK(c.data.train_images == "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
  CHECK(c.data.test_labels == "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
  CHECK(c.data.shard == ShardMode::node);
  CHECK(c.data.shard_method == ShardMethod::contiguous);
  CHECK(c.data.normalize);
  CHECK(c.checkpoint.dir.empty());
  CHECK(c.checkpoint.every == 0);
  CHECK_FALSE(c.metrics.listen.has_value());
  CHECK(c.metrics.log_format == LogFormat::text);
  CHECK(c.metrics.log_level == LogLevel::info);
  CHECK(c.metrics.csv.empty());
}

TEST_CASE("an empty map, or a file that sets a few keys, gets defaults for the rest") {
  DataFiles data;
  Config expected = defaults();
  const Config from_empty_map = must_load("{}", data.overrides());
  expected.data = from_empty_map.data;  // only the data paths were overridden
  CHECK(from_empty_map == expected);

  const Config partial = must_load("cluster: {name: x}\ngrid:\n", data.overrides());
  expected.cluster.name = "x";
  CHECK(partial == expected);
}

TEST_CASE("empty documents around the config are ignored") {
  CHECK(must_load("---\ngrid: {dims: 4}\nlearner: {kind: probe}\n---\n").grid.dims == 4);
  CHECK(must_load("---\n---\ngrid: {dims: 4}\nlearner: {kind: probe}\n...\n").grid.dims == 4);
}

TEST_CASE("a probe learner loads without any data files") {
  const Config c = must_load("learner:\n  kind: probe\n  probe_value: 0.5\ndata:\n  train_images: /no/such/file\n");
  CHECK(c.learner.kind == LearnerKind::probe);
  CHECK(c.learner.probe_value == 0.5);
  CHECK(c.data.train_images == "/no/such/file");
}

TEST_CASE("an external model (the PyTorch front end's) loads without any data files") {
  const Config c = must_load("learner:\n  kind: external\ndata:\n  train_images: /no/such/file\n");
  CHECK(c.learner.kind == LearnerKind::external);
}

TEST_CASE("a full config reads every key into its field") {
  TempDir dir;
  dir.write("secret", "token\n");
  const std::string yaml = R"(# a cluster of cheap machines
cluster:
  name: lab
  token_file: secret
  listen: "10.0.0.5:7000"
  heartbeat_ms: 50
  connection_timeout_ms: 400
grid:
  dims: auto
  max_line: 8
  rounds_in_flight: 2
allreduce:
  reduce_threshold: 0.75
  complete_threshold: 0.9
  advance_threshold: 0.5
  quorum: timeout
  quorum_timeout_ms: 250
  max_chunk_floats: 4096
  elastic_rate: 0.5
  every_steps: 3
  cpu_share: 0.25
  line_settle_ms: 0
learner:
  kind: probe
  probe_floats: 100
  probe_value: -2.5
  device: cpu
  seed: 18446744073709551615
  batch: 32
  epochs: 2
  threads: 4
  model:
    input: [1, 28, 28]
    layers:
      - {type: conv2d, filters: 32, kernel: 5, padding: 2}
      - {type: relu}
      - {type: maxpool, size: 2}
      - {type: conv2d, filters: 64, kernel: 5, stride: 1, padding: 2}
      - {type: relu}
      - type: maxpool
        size: 3
        stride: 2
      - {type: flatten}
      - {type: dense, units: 10}
      - {type: softmax_cross_entropy}
  optimizer:
    kind: sgd
    learning_rate: 0.1
    momentum: 0
    weight_decay: 1e-4
    schedule: step
    step_every_epochs: 2
    step_gamma: 0.5
data:
  shard: none
  shard_method: permutation
  normalize: false
checkpoint:
  dir: ckpt
  every: 500
metrics:
  listen: "0.0.0.0:9100"
  log_format: json
  log_level: debug
  csv: out/metrics.csv
)";
  const Config c = must_load(yaml, {}, dir.path().string());
  const std::string base = dir.path().string();
  CHECK(c.cluster.name == "lab");
  CHECK(c.cluster.token_file == base + "/secret");
  CHECK(c.cluster.listen == HostPort{"10.0.0.5", 7000});
  CHECK(c.cluster.heartbeat_ms == 50);
  CHECK(c.cluster.connection_timeout_ms == 400);
  CHECK_FALSE(c.grid.dims.has_value());
  CHECK(c.grid.max_line == 8);
  CHECK(c.grid.rounds_in_flight == 2);
  CHECK(c.allreduce.reduce_threshold == 0.75);
  CHECK(c.allreduce.complete_threshold == 0.9);
  CHECK(c.allreduce.advance_threshold == 0.5);
  CHECK(c.allreduce.quorum == QuorumMode::timeout);
  CHECK(c.allreduce.quorum_timeout_ms == 250);
  CHECK(c.allreduce.max_chunk_floats == 4096);
  CHECK(c.allreduce.elastic_rate == 0.5);
  CHECK(c.allreduce.every_steps == 3);
  CHECK(c.allreduce.cpu_share == 0.25);
  CHECK(c.allreduce.line_settle_ms == 0);
  CHECK(c.learner.kind == LearnerKind::probe);
  CHECK(c.learner.probe_floats == 100);
  CHECK(c.learner.probe_value == -2.5);
  CHECK(c.learner.device == Device::cpu);
  CHECK(c.learner.seed == 18446744073709551615ULL);
  CHECK(c.learner.batch == 32);
  CHECK(c.learner.epochs == 2);
  CHECK(c.learner.threads == 4);
  REQUIRE(c.learner.model.layers.size() == 9);
  const LayerSpec& conv = c.learner.model.layers[0];
  CHECK(conv == LayerSpec{.type = LayerType::conv2d, .filters = 32, .kernel = 5, .stride = 1, .padding = 2});
  CHECK(c.learner.model.layers[2] == LayerSpec{.type = LayerType::maxpool, .stride = 2, .size = 2});
  CHECK(c.learner.model.layers[5] == LayerSpec{.type = LayerType::maxpool, .stride = 2, .size = 3});
  CHECK(c.learner.model.layers[7] == LayerSpec{.type = LayerType::dense, .units = 10});
  CHECK(c.learner.optimizer.kind == OptimizerKind::sgd);
  CHECK(c.learner.optimizer.learning_rate == 0.1);
  CHECK(c.learner.optimizer.momentum == 0.0);
  CHECK(c.learner.optimizer.weight_decay == 1e-4);
  CHECK(c.learner.optimizer.schedule == Schedule::step);
  CHECK(c.learner.optimizer.step_every_epochs == 2);
  CHECK(c.learner.optimizer.step_gamma == 0.5);
  CHECK(c.data.shard == ShardMode::none);
  CHECK(c.data.shard_method == ShardMethod::permutation);
  CHECK_FALSE(c.data.normalize);
  CHECK(c.checkpoint.dir == base + "/ckpt");
  CHECK(c.checkpoint.every == 500);
  CHECK(c.metrics.listen == HostPort{"0.0.0.0", 9100});
  CHECK(c.metrics.log_format == LogFormat::json);
  CHECK(c.metrics.log_level == LogLevel::debug);
  CHECK(c.metrics.csv == base + "/out/metrics.csv");

  SUBCASE("and it round-trips through to_yaml") {
    const std::string text = to_yaml(c);
    CAPTURE(text);
    CHECK(must_load(text, {}, "/elsewhere") == c);  // resolved paths are absolute, so the base no longer matters
  }
}

TEST_CASE("to_yaml round-trips configs whose every key differs from its default") {
  DataFiles data;
  Config c = must_load("{}", data.overrides());
  c.cluster.name = "true";  // a string that YAML would otherwise read as a bool
  c.cluster.listen = HostPort{"::1", 65535};
  c.cluster.heartbeat_ms = 1;
  c.cluster.connection_timeout_ms = 2;
  c.grid.dims = 6;
  c.grid.max_line = 2;
  c.grid.rounds_in_flight = 7;
  c.allreduce.reduce_threshold = 0.1 + 0.2;  // not a short decimal: the text must be exact
  c.allreduce.complete_threshold = 1e-9;
  c.allreduce.advance_threshold = 2.0 / 3.0;
  c.allreduce.quorum = QuorumMode::timeout;
  c.allreduce.quorum_timeout_ms = 1;
  c.allreduce.max_chunk_floats = 1;
  c.allreduce.elastic_rate = 1.0;
  c.allreduce.outer = OuterMode::nesterov;
  c.allreduce.outer_rate = 2.0;
  c.allreduce.outer_momentum = 0.0;
  c.allreduce.wire = WireFormat::int8;
  c.allreduce.every_steps = 1000000;
  c.allreduce.cpu_share = 1.0 / 3.0;
  c.allreduce.line_settle_ms = 60000;
  c.learner.probe_floats = 1;
  c.learner.probe_value = 0.1;  // not exact in float: the text must keep double precision
  c.learner.device = Device::cuda;
  c.learner.precision = Precision::bf16;
  c.learner.data_on_device = DataOnDevice::yes;  // "true" in YAML: read back as the enum, not a boolean
  c.learner.seed = 0;
  c.learner.batch = 1;
  c.learner.epochs = 1;
  c.learner.threads = 2;
  c.learner.model.input = {784};
  c.learner.model.layers = {{.type = LayerType::dense, .units = 1}, {.type = LayerType::softmax_cross_entropy}};
  c.learner.optimizer.kind = OptimizerKind::sgd;
  c.learner.optimizer.learning_rate = 123456.789;
  c.learner.optimizer.momentum = 0.0;
  c.learner.optimizer.weight_decay = 5e-324;
  c.learner.optimizer.schedule = Schedule::cosine;
  c.learner.optimizer.step_every_epochs = 1;
  c.learner.optimizer.step_gamma = 1.0;
  c.learner.optimizer.scale_with_nodes = NodeScaling::sqrt;
  c.learner.optimizer.warmup_epochs = 0.5;
  c.data.shard = ShardMode::none;
  c.data.shard_method = ShardMethod::permutation;
  c.data.normalize = false;
  c.checkpoint.dir = "/tmp/with space/and \"quotes\"";
  c.checkpoint.every = 1;
  c.metrics.listen = HostPort{"metrics.local", 0};
  c.metrics.log_format = LogFormat::json;
  c.metrics.log_level = LogLevel::trace;
  c.metrics.csv = "/tmp/m.csv";

  const std::string text = to_yaml(c);
  CAPTURE(text);
  const Config back = must_load(text);
  CHECK(back == c);
  CHECK_FALSE(back == defaults());

  SUBCASE("and a probe learner with no data paths") {
    c.learner.kind = LearnerKind::probe;
    c.data.train_images = c.data.train_labels = c.data.test_images = c.data.test_labels = "";
    CHECK(must_load(to_yaml(c)) == c);
  }
}

TEST_CASE("overrides apply in order, after the file") {
  const std::string yaml = "learner: {kind: probe}\ngrid:\n  dims: 3\n  max_line: 4\n";
  CHECK(must_load(yaml).grid.dims == 3);
  CHECK(must_load(yaml, {"grid.dims=5"}).grid.dims == 5);
  CHECK(must_load(yaml, {"grid.dims=5", "grid.dims=auto"}).grid.dims == std::nullopt);
  CHECK(must_load(yaml, {"grid.dims=auto", "grid.dims=1"}).grid.dims == 1);

  const Config c = must_load(yaml, {" allreduce.elastic_rate = 0.5", "learner.model.input=[3,32,32]",
                                    "learner.model.layers=[{type: dense, units: 7}, {type: softmax_cross_entropy}]",
                                    "cluster.listen=0.0.0.0:7000", "metrics.listen=127.0.0.1:9100",
                                    "learner.probe_value=null", "cluster.name=a=b"});
  CHECK(c.allreduce.elastic_rate == 0.5);
  CHECK(c.learner.model.input == std::vector<int>{3, 32, 32});
  CHECK(c.learner.model.layers.size() == 2);
  CHECK(c.learner.model.layers[0].units == 7);
  CHECK(c.cluster.listen == HostPort{"0.0.0.0", 7000});
  CHECK(c.metrics.listen == HostPort{"127.0.0.1", 9100});
  CHECK_FALSE(c.learner.probe_value.has_value());
  CHECK(c.cluster.name == "a=b");  // only the first '=' splits
  CHECK(c.grid.max_line == 4);     // untouched keys keep the file's values
}

TEST_CASE("an override may set a whole section as a flow map") {
  const Config c = must_load("learner: {kind: probe}\ngrid: {dims: 3, rounds_in_flight: 5}\n",
                             {"grid={dims: auto, max_line: 9}"});
  CHECK_FALSE(c.grid.dims.has_value());
  CHECK(c.grid.max_line == 9);
  CHECK(c.grid.rounds_in_flight == 5);  // a section override sets the keys it names, not the others
}

TEST_CASE("relative paths in a file resolve against the file's directory, whatever the current directory") {
  TempDir config_dir;
  TempDir elsewhere;
  for (const char* name : {"data/train-images", "data/train-labels", "data/test-images", "data/test-labels"})
    config_dir.write(name, "idx");
  config_dir.write("token", "secret");
  const std::string path = config_dir
                               .write("cluster.yaml",
                                      "cluster: {token_file: token}\n"
                                      "data:\n"
                                      "  train_images: data/train-images\n"
                                      "  train_labels: ./data/train-labels\n"
                                      "  test_images: data/../data/test-images\n"
                                      "  test_labels: data/test-labels\n"
                                      "checkpoint: {dir: ckpt, every: 10}\n")
                               .string();
  const std::string base = config_dir.path().string();

  auto check_resolved = [&](const Config& c) {
    CHECK(c.cluster.token_file == base + "/token");
    CHECK(c.data.train_images == base + "/data/train-images");
    CHECK(c.data.train_labels == base + "/data/train-labels");
    CHECK(c.data.test_images == base + "/data/test-images");
    CHECK(c.data.test_labels == base + "/data/test-labels");
    CHECK(c.checkpoint.dir == base + "/ckpt");
  };

  SUBCASE("from another directory") {
    ScopedCwd cwd(elsewhere.path());
    auto r = load_file(path);
    REQUIRE_OK(r);
    check_resolved(r.value());
  }
  SUBCASE("from the config's directory, naming the file relatively") {
    ScopedCwd cwd(config_dir.path());
    auto r = load_file("cluster.yaml");
    REQUIRE_OK(r);
    check_resolved(r.value());
  }
  SUBCASE("a missing file is reported with the same absolute path from anywhere") {
    std::filesystem::remove(config_dir.path() / "data/test-labels");
    for (const std::filesystem::path& where : {elsewhere.path(), config_dir.path()}) {
      ScopedCwd cwd(where);
      auto r = load_file(path);
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().to_string() == path + ":6:16: data.test_labels: file not found: " + base + "/data/test-labels");
    }
  }
}

TEST_CASE("relative paths given with --set resolve against the current directory") {
  TempDir dir;
  dir.write("labels", "idx");
  ScopedCwd cwd(dir.path());
  const std::string cwd_path = std::filesystem::current_path().string();
  const Config c = must_load("learner: {kind: probe}\n", {"data.test_labels=labels", "metrics.csv=m.csv"},
                             "/somewhere/else");
  CHECK(c.data.test_labels == cwd_path + "/labels");
  CHECK(c.metrics.csv == cwd_path + "/m.csv");
}

TEST_CASE("the schema description lists every key with its type, default and doc, and every layer type") {
  const std::string text = describe_schema();
  const std::string yaml = to_yaml(defaults());
  for (const char* key :
       {"cluster.name", "cluster.token_file", "cluster.listen", "cluster.heartbeat_ms", "cluster.connection_timeout_ms",
        "grid.dims", "grid.max_line", "grid.rounds_in_flight", "allreduce.reduce_threshold",
        "allreduce.complete_threshold", "allreduce.advance_threshold", "allreduce.quorum",
        "allreduce.quorum_timeout_ms", "allreduce.max_chunk_floats", "allreduce.elastic_rate", "allreduce.outer",
        "allreduce.outer_rate", "allreduce.outer_momentum", "allreduce.every_steps",
        "allreduce.cpu_share", "allreduce.line_settle_ms",
        "learner.kind", "learner.probe_floats", "learner.probe_value", "learner.device", "learner.precision",
        "learner.data_on_device", "learner.seed",
        "learner.batch", "learner.epochs", "learner.threads", "learner.model.input", "learner.model.layers",
        "learner.optimizer.kind", "learner.optimizer.learning_rate", "learner.optimizer.momentum",
        "learner.optimizer.weight_decay", "learner.optimizer.schedule", "learner.optimizer.step_every_epochs",
        "learner.optimizer.step_gamma", "learner.optimizer.scale_with_nodes",
        "learner.optimizer.warmup_epochs", "data.train_images", "data.train_labels", "data.test_images",
        "data.test_labels", "data.shard", "data.shard_method", "data.normalize", "checkpoint.dir", "checkpoint.every",
        "metrics.listen", "metrics.log_format", "metrics.log_level", "metrics.csv"}) {
    const std::string path = key;
    CAPTURE(path);
    CHECK(text.find(path + ": ") != std::string::npos);
    const std::string leaf = path.substr(path.rfind('.') + 1);
    CHECK(yaml.find(" " + leaf + ":") != std::string::npos);
  }
  CHECK(text.find("allreduce.reduce_threshold: number in (0, 1] = 0.5") != std::string::npos);
  CHECK(text.find("grid.dims: integer in [1, 6] or auto = 2") != std::string::npos);
  CHECK(text.find("allreduce.quorum: fraction|timeout = timeout") != std::string::npos);
  for (const char* type : {"dense", "relu", "conv2d", "maxpool", "flatten", "softmax_cross_entropy"})
    CHECK(text.find(std::string("  ") + type + ": type") != std::string::npos);
}

TEST_CASE("enum values print and parse with their YAML spelling") {
  CHECK(to_string(Device::automatic) == "auto");
  CHECK(to_string(LayerType::softmax_cross_entropy) == "softmax_cross_entropy");
  CHECK(parse_enum<LogLevel>("warn") == LogLevel::warn);
  CHECK(parse_enum<QuorumMode>("timeout") == QuorumMode::timeout);
  CHECK_FALSE(parse_enum<QuorumMode>("Timeout").has_value());
}

TEST_CASE("the example config in tests/data shows every key at its default") {
  const std::string path = std::string(GRIDTRAIN_CONFIG_FIXTURES) + "/cluster.yaml";
  // As a probe, so that the check holds on machines without the Fashion-MNIST package.
  auto r = load_file(path, {"learner.kind=probe"});
  REQUIRE_OK(r);
  Config expected = defaults();
  expected.learner.kind = LearnerKind::probe;
  CHECK(r.value() == expected);

  // Every key is written out, not left to its default: each key line of to_yaml, indentation included, appears
  // in the example.
  const std::string text = [&] {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  const std::string dumped = to_yaml(defaults());
  for (std::size_t start = 0; start < dumped.size();) {
    const std::size_t end = dumped.find('\n', start);
    const std::string line = dumped.substr(start, end - start);
    start = end + 1;
    const auto colon = line.find(':');
    if (line.find_first_not_of(' ') == std::string::npos || colon == std::string::npos) continue;
    if (line.find("- {") != std::string::npos) continue;  // layer items
    const std::string key = line.substr(0, colon + 1);   // indentation and name, as the example must have it
    CAPTURE(key);
    CHECK(text.find("\n" + key) != std::string::npos);
  }
}
