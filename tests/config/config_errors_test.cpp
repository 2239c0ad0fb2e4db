// Bad configs: each must be rejected with one line that names the exact source, line:column and key, and says
// what was expected and what was found.

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "config/config.hpp"
#include "tests/config/temp_dir.hpp"

namespace {

using gridtrain::Error;
using gridtrain::config::load_file;
using gridtrain::config::load_string;
using gridtrain::config::testing::TempDir;

struct BadConfig {
  std::string defect;  // shown when the case fails
  std::string yaml;
  std::vector<std::string> overrides;
  std::string source;
  int line;
  int column;
  std::string key;
  std::string fragment;  // a part of the message: what was expected, or what was found
};

void check_rejected(const BadConfig& c, const std::string& base_dir = ".") {
  CAPTURE(c.defect);
  auto result = load_string(c.yaml, "cluster.yaml", c.overrides, base_dir);
  REQUIRE_FALSE(result.ok());
  const Error& e = result.error();
  CAPTURE(e.to_string());
  CHECK(e.source == c.source);
  CHECK(e.line == c.line);
  CHECK(e.column == c.column);
  CHECK(e.key == c.key);
  CHECK(e.message.find(c.fragment) != std::string::npos);
  CHECK(e.to_string().find('\n') == std::string::npos);
}

void check_all(const std::vector<BadConfig>& cases, const std::string& base_dir = ".") {
  for (const BadConfig& c : cases) check_rejected(c, base_dir);
}

const std::string file = "cluster.yaml";
const std::string set = "--set";

}  // namespace

TEST_CASE("a file with no content is an error, not a silent set of defaults") {
  check_all({
      {"empty", "", {}, file, 0, 0, "", "found an empty document"},
      {"blank lines", "\n\n  \n", {}, file, 0, 0, "", "found an empty document"},
      {"comments only", "# a config\n# nothing else\n", {}, file, 0, 0, "", "found an empty document"},
      {"null", "null\n", {}, file, 0, 0, "", "found an empty document"},
      {"tilde", "---\n~\n", {}, file, 0, 0, "", "write {} to take every default"},
  });
}

TEST_CASE("a YAML syntax error is reported at yaml-cpp's position with its message") {
  check_all({
      {"unclosed flow list", "grid:\n  dims: 2\nlearner:\n  model: {input: [1, 28\n", {}, file, 5, 1, "",
       "invalid YAML: end of sequence flow not found"},
      {"bad indentation", "grid:\n    dims: 2\n  max_line: 4\n", {}, file, 3, 3, "", "invalid YAML"},
      {"undefined alias", "grid:\n  dims: *nowhere\n", {}, file, 2, 9, "", "the referenced anchor is not defined"},
  });
}

TEST_CASE("a stream that yaml-cpp reads as endless empty documents is refused, not parsed until memory runs out") {
  // Found by the config fuzz target: yaml-cpp 0.7's LoadAll kept returning empty documents for these 97 bytes and
  // took 24 GB before the kernel killed the process.
  const unsigned char bytes[] = {
      0x2c, 0xf4, 0x12, 0x83, 0xc1, 0x11, 0xa6, 0x68, 0x6a, 0xd1, 0xe1, 0xd4, 0xa5, 0x99, 0x0d, 0x5c, 0x28, 0x65,
      0x6c, 0x3a, 0x20, 0x69, 0x6e, 0x66, 0x6f, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
      0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x23, 0x20, 0x74, 0x72, 0x61, 0x63, 0x65, 0x20, 0x7c, 0x20, 0x64, 0x65,
      0x62, 0x75, 0x67, 0x20, 0x7c, 0x20, 0x69, 0x6e, 0x66, 0x6f, 0x20, 0x7c, 0x20, 0x77, 0x61, 0x72, 0x6e, 0x20,
      0x7c, 0x20, 0x65, 0x72, 0x72, 0x6f, 0x72, 0x0a, 0x20, 0x20, 0x63, 0x73, 0x76, 0x3a, 0x20, 0x22, 0x22, 0x20,
      0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20};
  const auto loaded = load_string(std::string(reinterpret_cast<const char*>(bytes), sizeof bytes), "fuzzed.yaml");
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.error().message.find("more than 16 documents") != std::string::npos);
}

TEST_CASE("the top level must be one map of sections") {
  check_all({
      {"a list", "- cluster\n- grid\n", {}, file, 1, 1, "", "expected a map of sections (cluster, grid"},
      {"a scalar", "hello\n", {}, file, 1, 1, "", "found hello"},
      {"two documents", "grid: {dims: 2}\n---\ngrid: {dims: 3}\n", {}, file, 3, 1, "", "found a second one"},
      {"two documents between empty ones", "---\n---\ngrid: {dims: 2}\n---\n---\ngrid: {dims: 3}\n", {}, file, 6, 1, "",
       "expected one YAML document"},
  });
}

TEST_CASE("unknown keys at any depth are rejected at the key, with a suggestion when one is close") {
  check_all({
      {"misspelled section", "clustr:\n  name: x\n", {}, file, 1, 1, "clustr", "did you mean 'cluster'?"},
      {"unknown section", "training:\n  steps: 3\n", {}, file, 1, 1, "training",
       "unknown section; expected one of cluster, grid, allreduce"},
      {"misspelled key", "allreduce:\n  reduce_treshold: 0.5\n", {}, file, 2, 3, "allreduce.reduce_treshold",
       "did you mean 'allreduce.reduce_threshold'?"},
      {"key in the wrong section", "grid:\n  dims: 2\n  elastic_rate: 0.5\n", {}, file, 3, 3, "grid.elastic_rate",
       "did you mean 'allreduce.elastic_rate'?"},
      {"unknown nested key", "learner:\n  optimizer:\n    lr: 0.1\n", {}, file, 3, 5, "learner.optimizer.lr",
       "learner.optimizer takes kind, learning_rate, momentum"},
      {"misspelled layer key", "learner:\n  model:\n    layers:\n      - {type: dense, unit: 10}\n", {}, file, 4, 23,
       "learner.model.layers[0].unit", "did you mean 'units'?"},
      {"a key of another layer type", "learner:\n  model:\n    layers:\n      - type: relu\n        units: 5\n", {},
       file, 5, 9, "learner.model.layers[0].units", "a relu layer takes no keys besides 'type', not 'units'"},
      {"key given twice", "grid:\n  dims: 2\n  max_line: 4\n  dims: 3\n", {}, file, 4, 3, "grid.dims",
       "duplicate key (first given at line 2)"},
      {"section given twice", "grid: {dims: 2}\nallreduce: {}\ngrid: {dims: 3}\n", {}, file, 3, 1, "grid",
       "duplicate key (first given at line 1)"},
  });
}

TEST_CASE("a value of the wrong type is rejected at the value, saying what was expected and found") {
  check_all({
      {"a list where a section is expected", "grid: [1, 2]\n", {}, file, 1, 7, "grid",
       "expected a map, found a list of 2"},
      {"a scalar where a section is expected", "learner:\n  model: dense\n", {}, file, 2, 10, "learner.model",
       "expected a map, found dense"},
      {"a map where a string is expected", "cluster:\n  name: {first: a}\n", {}, file, 2, 9, "cluster.name",
       "expected a non-empty string, found a map"},
      {"a word for an integer", "learner:\n  batch: abc\n", {}, file, 2, 10, "learner.batch",
       "expected an integer >= 1, found abc"},
      {"a fraction for an integer", "learner:\n  epochs: 1.5\n", {}, file, 2, 11, "learner.epochs",
       "expected an integer >= 1, found 1.5"},
      {"a quoted number for an integer", "grid:\n  max_line: \"8\"\n", {}, file, 2, 13, "grid.max_line",
       "expected an integer >= 2, found \"8\""},
      {"a word for a number", "allreduce:\n  elastic_rate: half\n", {}, file, 2, 17, "allreduce.elastic_rate",
       "expected a number in (0, 1], found half"},
      {"yes for a bool", "data:\n  normalize: yes\n", {}, file, 2, 14, "data.normalize",
       "expected true or false, found yes"},
      {"a scalar where a list is expected", "learner:\n  model:\n    input: 784\n", {}, file, 3, 12,
       "learner.model.input", "expected a list of 1 to 3 integers >= 1, found 784"},
      {"a map where the layer list is expected", "learner:\n  model:\n    layers: {type: dense}\n", {}, file, 3, 13,
       "learner.model.layers", "expected a non-empty list of layers, found a map"},
      {"a scalar as a layer", "learner:\n  model:\n    layers:\n      - relu\n", {}, file, 4, 9,
       "learner.model.layers[0]", "expected a map with a 'type' key"},
      {"a list for an endpoint", "metrics:\n  listen: [a, b]\n", {}, file, 2, 11, "metrics.listen",
       "expected host:port or \"\", found a list of 2"},
      {"a word for an optional number", "learner:\n  probe_value: lots\n", {}, file, 2, 16, "learner.probe_value",
       "expected a number or null, found lots"},
      {"a multi-line string for an integer", "learner:\n  batch: \"6\\n4\"\n", {}, file, 2, 10, "learner.batch",
       "found \"6\\n4\""},
      {"a key with a newline", "grid:\n  ? \"di\\nms\"\n  : 2\n", {}, file, 2, 5, "grid.di\\nms", "unknown key"},
      {"a list as a key", "grid:\n  ? [dims]\n  : 2\n", {}, file, 2, 5, "grid",
       "expected a key name, found a list of 1"},
      {"an empty value for a required string", "cluster:\n  name:\n  heartbeat_ms: 100\n", {}, file, 2, 3,
       "cluster.name", "expected a non-empty string, found null"},
  });
}

TEST_CASE("out-of-range values are rejected with the allowed range") {
  check_all({
      {"reduce threshold above 1", "allreduce:\n  reduce_threshold: 1.5\n", {}, file, 2, 21,
       "allreduce.reduce_threshold", "expected a number in (0, 1], found 1.5"},
      {"complete threshold 0", "allreduce: {complete_threshold: 0}\n", {}, file, 1, 33,
       "allreduce.complete_threshold", "expected a number in (0, 1], found 0"},
      {"negative advance threshold", "allreduce: {advance_threshold: -0.5}\n", {}, file, 1, 32,
       "allreduce.advance_threshold", "found -0.5"},
      {"elastic rate 0", "allreduce:\n  elastic_rate: 0.0\n", {}, file, 2, 17, "allreduce.elastic_rate",
       "expected a number in (0, 1], found 0.0"},
      {"cpu share 0", "allreduce:\n  cpu_share: 0\n", {}, file, 2, 14, "allreduce.cpu_share",
       "expected a number in (0, 1], found 0"},
      {"cpu share above 1", "allreduce: {cpu_share: 1.5}\n", {}, file, 1, 24, "allreduce.cpu_share", "found 1.5"},
      {"outer rate above 2", "allreduce:\n  outer: nesterov\n  outer_rate: 3\n", {}, file, 3, 15,
       "allreduce.outer_rate", "expected a number in (0, 2], found 3"},
      {"outer momentum 1", "allreduce: {outer: nesterov, outer_momentum: 1}\n", {}, file, 1, 46,
       "allreduce.outer_momentum", "expected a number in [0, 1), found 1"},
      {"an unknown outer mode", "allreduce: {outer: adam}\n", {}, file, 1, 20, "allreduce.outer",
       "expected one of elastic|nesterov, found adam"},
      {"an unknown wire format", "allreduce:\n  wire: fp8\n", {}, file, 2, 9, "allreduce.wire",
       "expected one of fp32|bf16|int8, found fp8"},
      {"an unknown rate scaling", "learner:\n  optimizer: {scale_with_nodes: cube}\n", {}, file, 2, 33,
       "learner.optimizer.scale_with_nodes", "expected one of none|linear|sqrt, found cube"},
      {"a negative warm-up", "learner:\n  optimizer:\n    warmup_epochs: -1\n", {}, file, 3, 20,
       "learner.optimizer.warmup_epochs", "found -1"},
      {"dims 7", "grid: {dims: 7}\n", {}, file, 1, 14, "grid.dims",
       "expected an integer in [1, 6] or \"auto\", found 7"},
      {"dims 0", "grid: {dims: 0}\n", {}, file, 1, 14, "grid.dims", "found 0"},
      {"dims as a word", "grid: {dims: three}\n", {}, file, 1, 14, "grid.dims", "or \"auto\", found three"},
      {"max_line 1", "grid: {dims: auto, max_line: 1}\n", {}, file, 1, 30, "grid.max_line",
       "expected an integer >= 2, found 1"},
      {"no rounds in flight", "grid:\n  rounds_in_flight: 0\n", {}, file, 2, 21, "grid.rounds_in_flight",
       "expected an integer in [1, 16], found 0"},
      // More than a member's DimensionNode would run: refused here, not silently dropped by every member later.
      {"too many rounds in flight", "grid:\n  rounds_in_flight: 17\n", {}, file, 2, 21, "grid.rounds_in_flight",
       "expected an integer in [1, 16], found 17"},
      {"zero chunk size", "allreduce:\n  max_chunk_floats: 0\n", {}, file, 2, 21, "allreduce.max_chunk_floats",
       "expected an integer >= 1, found 0"},
      {"batch 0", "learner:\n  batch: 0\n", {}, file, 2, 10, "learner.batch", "expected an integer >= 1, found 0"},
      {"negative learning rate", "learner:\n  optimizer:\n    learning_rate: -0.01\n", {}, file, 3, 20,
       "learner.optimizer.learning_rate", "expected a number > 0, found -0.01"},
      {"momentum of 1", "learner:\n  optimizer: {momentum: 1.0}\n", {}, file, 2, 25, "learner.optimizer.momentum",
       "expected a number in [0, 1), found 1.0"},
      {"step gamma 0", "learner:\n  optimizer: {schedule: step, step_gamma: 0}\n", {}, file, 2, 43,
       "learner.optimizer.step_gamma", "in (0, 1], found 0"},
      {"negative duration", "cluster:\n  heartbeat_ms: -5\n", {}, file, 2, 17, "cluster.heartbeat_ms",
       "expected an integer >= 1, found -5"},
      {"negative quorum timeout", "allreduce:\n  quorum_timeout_ms: -1\n", {}, file, 2, 22,
       "allreduce.quorum_timeout_ms", "expected an integer >= 0, found -1"},
      {"an integer past 64 bits", "learner:\n  threads: 99999999999999999999\n", {}, file, 2, 12, "learner.threads",
       "expected an integer in [0, 2147483647], found 99999999999999999999"},
      {"an integer past int", "learner:\n  epochs: 3000000000\n", {}, file, 2, 11, "learner.epochs",
       "expected an integer in [1, 2147483647], found 3000000000"},
      {"a negative seed", "learner:\n  seed: -1\n", {}, file, 2, 9, "learner.seed", "found -1"},
      {"infinity", "allreduce:\n  elastic_rate: .inf\n", {}, file, 2, 17, "allreduce.elastic_rate", "found .inf"},
      {"a bad enum", "allreduce:\n  quorum: majority\n", {}, file, 2, 11, "allreduce.quorum",
       "expected one of fraction|timeout, found majority"},
      {"a misspelled enum", "metrics:\n  log_level: warning\n", {}, file, 2, 14, "metrics.log_level",
       "expected one of trace|debug|info|warn|error, found warning (did you mean 'warn'?)"},
      {"an enum in the wrong case", "learner: {device: CPU}\n", {}, file, 1, 19, "learner.device",
       "found CPU (did you mean 'cpu'?)"},
      {"a precision PyTorch spells otherwise", "learner: {precision: bfloat16}\n", {}, file, 1, 22,
       "learner.precision", "expected one of fp32|tf32|bf16, found bfloat16"},
      {"data_on_device as a word", "learner: {data_on_device: yes}\n", {}, file, 1, 27, "learner.data_on_device",
       "expected one of auto|true|false, found yes"},
  });
}

TEST_CASE("a malformed host:port is rejected at its value") {
  check_all({
      {"port too large", "cluster:\n  listen: \"localhost:99999\"\n", {}, file, 2, 11, "cluster.listen",
       "expected a port in 0..65535 after ':', found 'localhost:99999'"},
      {"no host", "cluster:\n  listen: \":7000\"\n", {}, file, 2, 11, "cluster.listen", "a host before ':port'"},
      {"no port", "metrics: {listen: localhost}\n", {}, file, 1, 19, "metrics.listen", "no ':port'"},
      {"listen must be set", "cluster:\n  listen: \"\"\n", {}, file, 2, 11, "cluster.listen",
       "expected host:port, found an empty string"},
  });
}

TEST_CASE("layers are checked item by item, with the index in the key") {
  const std::string head = "learner:\n  model:\n    layers:\n";
  check_all({
      {"zero units in the second layer",
       head + "      - {type: dense, units: 32}\n" + "      - {type: dense, units: 0}\n" +
           "      - {type: softmax_cross_entropy}\n",
       {}, file, 5, 30, "learner.model.layers[1].units", "expected an integer >= 1, found 0"},
      {"negative padding", head + "      - {type: conv2d, filters: 8, kernel: 3, padding: -1}\n", {}, file, 4, 56,
       "learner.model.layers[0].padding", "expected an integer >= 0, found -1"},
      {"a layer without a type", head + "      - {units: 5}\n", {}, file, 4, 9, "learner.model.layers[0]",
       "expected a 'type' key (dense|relu|conv2d|maxpool|flatten|softmax_cross_entropy), found none"},
      {"an unknown layer type", head + "      - {type: dropout}\n", {}, file, 4, 16, "learner.model.layers[0].type",
       "expected one of dense|relu|conv2d|maxpool|flatten|softmax_cross_entropy, found dropout"},
      {"a dense layer without units", head + "      - {type: dense}\n      - {type: softmax_cross_entropy}\n", {},
       file, 4, 9, "learner.model.layers[0]", "expected a dense layer to have 'units'"},
      {"a maxpool layer without size", head + "      - {type: maxpool, stride: 2}\n", {}, file, 4, 9,
       "learner.model.layers[0]", "expected a maxpool layer to have 'size'"},
      {"conv2d given units", head + "      - {type: conv2d, filters: 4, kernel: 3, units: 9}\n", {}, file, 4, 47,
       "learner.model.layers[0].units", "a conv2d layer takes 'type', filters, kernel, stride, padding, not 'units'"},
      {"no loss at the end", head + "      - {type: dense, units: 10}\n      - {type: relu}\n", {}, file, 5, 9,
       "learner.model.layers[1]", "expected the model to end with softmax_cross_entropy, found relu last"},
      {"the loss in the middle",
       head + "      - {type: softmax_cross_entropy}\n" + "      - {type: dense, units: 10}\n" +
           "      - {type: softmax_cross_entropy}\n",
       {}, file, 4, 9, "learner.model.layers[0]", "expected softmax_cross_entropy only as the last layer"},
      {"no layers", head.substr(0, head.size() - 1) + " []\n", {}, file, 3, 13, "learner.model.layers",
       "expected a non-empty list of layers, found an empty list"},
      {"an input extent of 0", "learner:\n  model:\n    input: [1, 0, 28]\n", {}, file, 3, 16,
       "learner.model.input[1]", "expected an integer >= 1, found 0"},
      {"a 4-D input", "learner:\n  model:\n    input: [1, 1, 28, 28]\n", {}, file, 3, 12, "learner.model.input",
       "found a list of 4"},
  });
}

TEST_CASE("checks across keys point at the key the user set") {
  check_all({
      {"timeout quorum with no timeout",
       "learner: {kind: probe}\nallreduce:\n  quorum: timeout\n  quorum_timeout_ms: 0\n", {}, file, 4, 22,
       "allreduce.quorum_timeout_ms", "expected > 0 with allreduce.quorum timeout, found 0"},
      {"timeout quorum with the timeout zeroed by --set", "learner: {kind: probe}\nallreduce:\n  quorum: timeout\n",
       {"allreduce.quorum_timeout_ms=0"}, set, 0, 0, "allreduce.quorum_timeout_ms", "found 0"},
      {"timeout quorum set by --set over a zero timeout in the file",
       "learner: {kind: probe}\nallreduce: {quorum_timeout_ms: 0}\n", {"allreduce.quorum=timeout"}, file, 2, 32,
       "allreduce.quorum_timeout_ms", "expected > 0 with allreduce.quorum timeout"},
      {"heartbeat above the default connection timeout", "learner: {kind: probe}\ncluster: {heartbeat_ms: 2000}\n",
       {}, file, 2, 25, "cluster.heartbeat_ms", "expected less than cluster.connection_timeout_ms (1000), found 2000"},
      {"connection timeout below the heartbeat", "learner: {kind: probe}\ncluster:\n  connection_timeout_ms: 100\n",
       {}, file, 3, 26, "cluster.connection_timeout_ms", "expected more than cluster.heartbeat_ms (200), found 100"},
      {"nesterov with a fraction quorum that reduces from one model",
       "learner: {kind: probe}\nallreduce:\n  quorum: fraction\n  outer: nesterov\n", {}, file, 4, 10,
       "allreduce.outer", "and nesterov skips such means: set reduce_threshold above 0.5, or quorum timeout), found "
       "nesterov"},
      {"checkpoints with nowhere to go", "learner: {kind: probe}\ncheckpoint:\n  every: 100\n", {}, file, 3, 10,
       "checkpoint.every", "expected 0 (off) while checkpoint.dir is \"\", found 100"},
      {"tf32 on the CPU", "learner:\n  device: cpu\n  precision: tf32\n", {}, file, 3, 14, "learner.precision",
       "expected fp32 with learner.device cpu, found tf32: the CPU backend computes in FP32 only (tf32 needs a GPU)"},
      {"bf16 on the CPU, from --set", "learner: {device: cpu}\n", {"learner.precision=bf16"}, set, 0, 0,
       "learner.precision", "expected fp32 with learner.device cpu, found bf16"},
      {"the CPU asked to hold the data on a device", "learner:\n  device: cpu\n  data_on_device: true\n", {}, file, 3,
       19, "learner.data_on_device", "expected auto or false with learner.device cpu, found true"},
  });
}

TEST_CASE("overrides that do not parse or name no key are errors from --set") {
  check_all({
      {"unknown key", "{}", {"allreduce.elastic_rat=0.5"}, set, 0, 0, "allreduce.elastic_rat",
       "did you mean 'allreduce.elastic_rate'?"},
      {"misspelled section", "{}", {"alreduce.elastic_rate=0.5"}, set, 0, 0, "alreduce.elastic_rate",
       "did you mean 'allreduce.elastic_rate'?"},
      {"list item", "{}", {"learner.model.layers[1].units=3"}, set, 0, 0, "learner.model.layers[1].units",
       "--set replaces a list whole"},
      {"bad value", "{}", {"grid.dims=2", "allreduce.elastic_rate=1.5"}, set, 0, 0, "allreduce.elastic_rate",
       "expected a number in (0, 1], found 1.5"},
      {"missing '='", "{}", {"allreduce.elastic_rate"}, set, 0, 0, "",
       "expected key=value, found 'allreduce.elastic_rate'"},
      {"missing key", "{}", {"=0.5"}, set, 0, 0, "", "expected key=value with a key before '='"},
      {"broken YAML value", "{}", {"learner.model.input=[1, 28"}, set, 0, 0, "learner.model.input",
       "expected a YAML value after '=', found '[1, 28'"},
      {"a scalar for a section", "{}", {"grid=3"}, set, 0, 0, "grid", "expected a map, found 3"},
      {"an unknown key inside a section override", "{}", {"grid={dims: 2, max_lines: 4}"}, set, 0, 0,
       "grid.max_lines", "did you mean 'grid.max_line'?"},
      {"an empty value", "{}", {"learner.batch="}, set, 0, 0, "learner.batch", "found null"},
      {"a bad endpoint", "{}", {"cluster.listen=nohost"}, set, 0, 0, "cluster.listen", "found 'nohost'"},
      {"an error in the file comes before the overrides", "grid: {dims: 9}\n", {"grid.dims=2"}, file, 1, 14,
       "grid.dims", "found 9"},
  });
}

TEST_CASE("named files that do not exist are errors at the key that named them") {
  TempDir dir;
  dir.write("empty-token", "");
  dir.write("token", "s3cret\n");
  dir.write("data/train-images.gz", "x");
  dir.write("data/train-labels.gz", "x");
  dir.write("data/test-images.gz", "x");
  const std::string data =
      "data:\n"
      "  train_images: data/train-images.gz\n"
      "  train_labels: data/train-labels.gz\n"
      "  test_images: data/test-images.gz\n"
      "  test_labels: data/test-labels.gz\n";
  const std::string base = dir.path().string();
  check_all(
      {
          {"missing token file", "learner: {kind: probe}\ncluster:\n  token_file: no-such-token\n", {}, file, 3, 15,
           "cluster.token_file", "file not found: " + base + "/no-such-token"},
          {"empty token file", "learner: {kind: probe}\ncluster: {token_file: empty-token}\n", {}, file, 2, 23,
           "cluster.token_file", "expected a non-empty file, found an empty one"},
          {"token file is a directory", "learner: {kind: probe}\ncluster: {token_file: data}\n", {}, file, 2, 23,
           "cluster.token_file", "expected a file, found a directory"},
          {"missing data file", data, {}, file, 5, 16, "data.test_labels",
           "file not found: " + base + "/data/test-labels.gz"},
          {"missing data file given by --set", data, {"data.test_labels=/no/such/labels.gz"}, set, 0, 0,
           "data.test_labels", "file not found: /no/such/labels.gz"},
          {"a data path emptied while training a model", "learner: {kind: model}\n", {"data.train_images="}, set, 0, 0,
           "data.train_images", "expected a data file (learner.kind is model), found \"\""},
          {"kind switched to model by --set with missing data", "learner: {kind: probe}\n" + data,
           {"learner.kind=model"}, file, 6, 16, "data.test_labels", "file not found"},
          {"a TLS certificate that is not there",
           "learner: {kind: probe}\ncluster: {tls_certificate: node.pem, tls_key: token, tls_ca: token}\n", {}, file,
           2, 28, "cluster.tls_certificate", "file not found: " + base + "/node.pem"},
          {"a TLS certificate without its key and CA", "learner: {kind: probe}\ncluster: {tls_certificate: token}\n",
           {}, file, 2, 28, "cluster.tls_certificate",
           "expected cluster.tls_key set too (TLS needs a certificate, its key and the cluster CA), found \"\""},
          {"a TLS CA without a certificate", "learner: {kind: probe}\ncluster: {tls_ca: token, tls_key: token}\n", {},
           file, 2, 35, "cluster.tls_key", "expected cluster.tls_certificate set too"},
      },
      base);
}

TEST_CASE("a config file that cannot be read is an error naming the file") {
  TempDir dir;
  const std::string missing = (dir.path() / "nope.yaml").string();
  auto r = load_file(missing);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().source == missing);
  CHECK(r.error().line == 0);
  CHECK(r.error().message.find("no such file") != std::string::npos);

  auto d = load_file(dir.path().string());
  REQUIRE_FALSE(d.ok());
  CHECK(d.error().source == dir.path().string());
  CHECK(d.error().message.find("found a directory") != std::string::npos);
}

TEST_CASE("errors in a file loaded from disk carry its path as the source") {
  TempDir dir;
  const std::string path = dir.write("cluster.yaml", "grid:\n  dims: 2\n\nallreduce:\n  elastic_rate: 2\n").string();
  auto r = load_file(path);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().to_string() == path + ":5:17: allreduce.elastic_rate: expected a number in (0, 1], found 2");

  const std::string empty = dir.write("empty.yaml", "# nothing yet\n").string();
  auto e = load_file(empty);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().source == empty);
  CHECK(e.error().message.find("found an empty document") != std::string::npos);
}
