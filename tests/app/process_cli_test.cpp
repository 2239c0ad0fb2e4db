// The gridnode command line as a contract (README.md, "The command line"): exit codes and one-line errors,
// checked on the real binary.

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <csignal>
#include <sstream>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "app/local_capacity.hpp"
#include "tests/app/process_harness.hpp"
#include "tests/loopback_socket.hpp"
#include "tests/tls_certificates.hpp"

using gridtrain::testing::run_command;
using namespace std::chrono_literals;

namespace {

const std::string gridnode = GRIDNODE_PATH;

struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& text) {
    path = std::filesystem::temp_directory_path() /
           ("gridtrain-cli-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++) + ".yaml");
    std::ofstream(path) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace

TEST_CASE("check-config exits 0 on a good config") {
  TempFile file("learner:\n  kind: probe\n  probe_floats: 100\ngrid:\n  dims: 2\n");
  auto r = run_command(gridnode, {"check-config", file.path.string()}, 30s);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find(": ok") != std::string::npos);
}

TEST_CASE("check-config names file, position and key of a bad value, in one error line, exit 2") {
  TempFile file("learner:\n  kind: probe\nallreduce:\n  reduce_threshold: 1.5\n");
  auto r = run_command(gridnode, {"check-config", file.path.string()}, 30s);
  CHECK(r.exit_code == 2);
  CHECK(r.output.rfind("error: " + file.path.string() + ":4:21: allreduce.reduce_threshold:", 0) == 0);
  CHECK(count_lines(r.output) == 1);
}

TEST_CASE("check-config loads the TLS files as a node would: a key of another certificate is an error, exit 2") {
  gridtrain::testing::TestCertificates certs({"a", "b"});
  const std::string tls = "cluster:\n  tls_certificate: " + certs.path("a.pem") + "\n  tls_ca: " + certs.path("ca.pem") +
                          "\n  tls_key: ";
  TempFile good("learner: {kind: probe}\n" + tls + certs.path("a.key") + "\n");
  CHECK(run_command(gridnode, {"check-config", good.path.string()}, 30s).exit_code == 0);
  TempFile bad("learner: {kind: probe}\n" + tls + certs.path("b.key") + "\n");
  auto r = run_command(gridnode, {"check-config", bad.path.string()}, 30s);
  CHECK(r.exit_code == 2);
  CHECK(r.output.rfind("error: " + certs.path("b.key") + ": cluster.tls_key: the key does not belong to the "
                       "certificate " + certs.path("a.pem"), 0) == 0);
  CHECK(count_lines(r.output) == 1);
}

TEST_CASE("check-config applies --set overrides and reports a bad one") {
  TempFile file("learner:\n  kind: probe\n");
  auto good = run_command(gridnode, {"check-config", file.path.string(), "--set", "grid.dims=3", "--print"}, 30s);
  CHECK(good.exit_code == 0);
  CHECK(good.output.find("dims: 3") != std::string::npos);
  auto bad = run_command(gridnode, {"check-config", file.path.string(), "--set", "grid.dimz=3"}, 30s);
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.rfind("error: --set", 0) == 0);
  CHECK(bad.output.find("grid.dimz") != std::string::npos);
}

TEST_CASE("a missing config file is bad input") {
  auto r = run_command(gridnode, {"check-config", "/nonexistent/cluster.yaml"}, 30s);
  CHECK(r.exit_code == 2);
  CHECK(r.output.rfind("error: /nonexistent/cluster.yaml", 0) == 0);
}

// A node tells the others its listen address, and they dial it. Any-address, or loopback with a seed on another
// machine, made a node that joined and showed in `gridnode status` and never averaged with a peer elsewhere (seen
// with two network namespaces, both at 0.0.0.0:7000: each dialled itself, rounds "done" without the other's
// values, only info lines of failed connections in the log). Now it is refused before it starts, saying where the
// address came from.
TEST_CASE("a listen address the other nodes cannot dial is bad input: any-address, or loopback with a seed elsewhere") {
  TempFile file("cluster:\n  listen: 0.0.0.0:7000\nlearner:\n  kind: probe\n");
  auto from_file = run_command(gridnode, {"run", "--config", file.path.string()}, 30s);
  CHECK(from_file.exit_code == 2);
  CHECK_MESSAGE(from_file.output.rfind("error: " + file.path.string() + ": cluster.listen: 0.0.0.0:7000", 0) == 0,
                from_file.output);
  CHECK(count_lines(from_file.output) == 1);

  auto option = run_command(gridnode, {"run", "--config", file.path.string(), "--listen", "[::]:0"}, 30s);
  CHECK(option.exit_code == 2);
  CHECK_MESSAGE(option.output.rfind("error: --listen: [::]:0", 0) == 0, option.output);

  auto set = run_command(gridnode, {"run", "--config", file.path.string(), "--set", "cluster.listen=0.0.0.0:0"}, 30s);
  CHECK(set.exit_code == 2);
  CHECK_MESSAGE(set.output.rfind("error: --set: cluster.listen: 0.0.0.0:0", 0) == 0, set.output);

  // 203.0.113.7 (TEST-NET-3, documentation only) is no address of this machine.
  auto loopback = run_command(
      gridnode, {"run", "--config", file.path.string(), "--listen", "127.0.0.1:0", "--seed", "203.0.113.7:7000"}, 30s);
  CHECK(loopback.exit_code == 2);
  CHECK_MESSAGE(loopback.output.find("the seed 203.0.113.7:7000 is on another machine") != std::string::npos,
                loopback.output);

  // Loopback with seeds on this machine is a local cluster, as the demo's: it starts (and, its seed not answering,
  // exits 1 as unreachable, not 2).
  auto local = run_command(
      gridnode, {"run", "--config", file.path.string(), "--listen", "127.0.0.1:0", "--seed", "127.0.0.1:1"}, 60s);
  CHECK_MESSAGE(local.exit_code == 1, local.output);
  CHECK(local.output.find("cannot reach seed 127.0.0.1:1") != std::string::npos);

  // Its own address as the only seed: bad input at once (joining through itself timed out after 10 s). In a list,
  // its own address is left out and the others are tried.
  auto itself = run_command(
      gridnode, {"run", "--config", file.path.string(), "--listen", "127.0.0.1:1", "--seed", "127.0.0.1:1"}, 30s);
  CHECK(itself.exit_code == 2);
  CHECK_MESSAGE(itself.output.rfind("error: --seed: 127.0.0.1:1 is this node's own listen address", 0) == 0,
                itself.output);
  const std::string own = "127.0.0.1:" + std::to_string(gridtrain::testing::free_loopback_port());
  auto listed = run_command(
      gridnode, {"run", "--config", file.path.string(), "--listen", own, "--seed", own + ",127.0.0.1:1"}, 60s);
  CHECK_MESSAGE(listed.exit_code == 1, listed.output);
  CHECK(listed.output.find("cannot reach seed 127.0.0.1:1") != std::string::npos);
  CHECK(listed.output.find("seed " + own) == std::string::npos);
}

TEST_CASE("demo and chaos refuse more nodes than this machine can hold, at once, before starting any") {
  const gridtrain::app::LocalCapacity here = gridtrain::app::local_capacity();
  const std::string too_many = std::to_string(here.limit() + 1);
  for (const char* command : {"demo", "chaos"}) {
    CAPTURE(command);
    const auto started = std::chrono::steady_clock::now();
    auto r = run_command(gridnode, {command, "--nodes", too_many, "--out", "/nonexistent/not-created"}, 30s);
    CHECK(r.exit_code == 2);
    CHECK(r.output.rfind("error: ", 0) == 0);
    CHECK(r.output.find("--nodes " + too_many + " is more than this machine can hold: at most " +
                        std::to_string(here.limit())) != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - started < 10s);  // refused, not tried
    CHECK_FALSE(std::filesystem::exists("/nonexistent/not-created"));
  }
  // The rule: the fewer of 32 a core and MemAvailable / 200 MB, each named where it binds.
  const gridtrain::app::LocalCapacity small{.cores = 2, .available_bytes = 1LL << 30};
  CHECK(small.limit() == 5);
  auto memory = gridtrain::app::fits_here("demo", 6, small);
  REQUIRE_FALSE(memory.ok());
  CHECK(memory.error().message.find("each node takes about 200 MB, and 1.0 GiB of memory are available") !=
        std::string::npos);
  const gridtrain::app::LocalCapacity cores{.cores = 2, .available_bytes = 0};
  CHECK(gridtrain::app::fits_here("chaos", 64, cores).ok());
  auto by_cores = gridtrain::app::fits_here("chaos", 65, cores);
  REQUIRE_FALSE(by_cores.ok());
  CHECK(by_cores.error().message.find("at most 64 (32 per core on 2 cores)") != std::string::npos);
}

TEST_CASE("an unknown subcommand or option is bad input, --help is not") {
  auto unknown = run_command(gridnode, {"frobnicate"}, 30s);
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.output.rfind("error: ", 0) == 0);
  auto none = run_command(gridnode, {}, 30s);
  CHECK(none.exit_code == 2);
  auto help = run_command(gridnode, {"check-config", "--help"}, 30s);
  CHECK(help.exit_code == 0);
  CHECK(help.output.find("--set") != std::string::npos);
}

TEST_CASE("--log-format json: every line a node writes is one JSON object; --log-level warn keeps its events only") {
  TempFile file("cluster:\n  listen: 127.0.0.1:0\nlearner:\n  kind: probe\n  probe_floats: 100\n");
  auto run_node = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{"run", "--config", file.path.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    auto started = gridtrain::testing::ChildProcess::start(gridnode, args);
    REQUIRE(started.ok());
    auto node = std::move(started).value();
    REQUIRE_MESSAGE(node->wait_for_line("joined the cluster as node", 30s), node->output());
    node->signal(SIGTERM);  // leaves the cluster, logging as it goes
    const auto code = node->wait_exit(30s);
    REQUIRE_MESSAGE(code == 0, "exit " << (code ? std::to_string(*code) : "none in 30 s") << "\n" << node->output());
    return node->output();
  };
  const std::string json_output = run_node({"--log-format", "json"});
  INFO(json_output);
  int lines = 0, logs = 0, events = 0;
  std::istringstream in(json_output);
  for (std::string line; std::getline(in, line); ++lines) {
    const auto object = nlohmann::json::parse(line, nullptr, false);
    REQUIRE_MESSAGE(object.is_object(), line);
    for (const char* key : {"time", "level", "event", "msg"}) CHECK(object[key].is_string());
    if (object["event"] == "log") ++logs;
    if (object["event"] == "listening") {
      ++events;
      CHECK(object["address"].get<std::string>().rfind("127.0.0.1:", 0) == 0);
    }
    if (object["event"] == "joined") ++events;
  }
  CHECK(events == 2);
  CHECK(logs >= 2);  // the GridMaster's "joined", the node's "leaving", ...

  const std::string quiet = run_node({"--log-format", "json", "--log-level", "warn"});
  CHECK(quiet.find("\"event\":\"log\"") == std::string::npos);  // nothing at warn or worse happened
  CHECK(quiet.find("\"event\":\"joined\"") != std::string::npos);

  auto bad = run_command(gridnode, {"run", "--config", file.path.string(), "--log-format", "xml"}, 30s);
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.rfind("error: --log-format: expected one of text|json, found xml", 0) == 0);
}

TEST_CASE("plot draws four PNGs from a metrics CSV of several nodes; a bad row is an error with file and line") {
  TempFile csv("time_s,node,epoch,samples,samples_per_s,loss,test_accuracy,tau,rounds\n"
               "1.5,0,1,15000,9800.5,0.61,0.80,3.10,120\n"
               "1.6,1,1,15000,9700.0,0.63,0.79,,0\n"  // no round completed: tau is empty
               "time_s,node,epoch,samples,samples_per_s,loss,test_accuracy,tau,rounds\n"  // a second file's header
               "3.0,0,2,30000,9900.0,0.45,0.84,2.90,250\n"
               "3.1,1,2,30000,9750.0,0.47,0.83,3.00,240\n");
  const auto out = std::filesystem::temp_directory_path() / ("gridtrain-plot-" + std::to_string(::getpid()));
  auto r = run_command(gridnode, {"plot", csv.path.string(), "--out", out.string()}, 60s);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  for (const char* plot : {"accuracy.png", "loss.png", "samples_per_s.png", "tau.png"}) {
    std::ifstream png(out / plot, std::ios::binary);
    char magic[4] = {};
    png.read(magic, 4);
    CHECK_MESSAGE(std::string(magic + 1, 3) == "PNG", plot);
    CHECK(r.output.find(plot) != std::string::npos);
  }
  std::filesystem::remove_all(out);

  // One node alone never averages, so every row's tau is empty: the four plots are still drawn (gnuplot refused
  // the whole script, and `plot` exited 1, before tau's chart said so instead).
  TempFile alone("time_s,node,epoch,samples,samples_per_s,loss,test_accuracy,tau,rounds\n"
                 "1.5,0,1,60000,39634.5,0.46,0.86,,0\n"
                 "3.4,0,2,120000,34140.7,0.31,0.87,,0\n");
  auto single = run_command(gridnode, {"plot", alone.path.string(), "--out", out.string()}, 60s);
  INFO(single.output);
  CHECK(single.exit_code == 0);
  for (const char* plot : {"accuracy.png", "loss.png", "samples_per_s.png", "tau.png"})
    CHECK_MESSAGE(std::filesystem::file_size(out / plot) > 0, plot);
  std::filesystem::remove_all(out);

  TempFile bad("time_s,node,epoch,samples,samples_per_s,loss,test_accuracy,tau,rounds\n"
               "1.5,0,1,15000,fast,0.61,0.80,3.10,120\n");
  auto refused = run_command(gridnode, {"plot", bad.path.string(), "--out", out.string()}, 60s);
  CHECK(refused.exit_code == 2);
  CHECK(refused.output.rfind("error: " + bad.path.string() + ":2: field 5 ('fast') is not a finite number", 0) == 0);
  // A node name that could reach gnuplot's script is refused before gnuplot runs.
  TempFile crafted("1.5,x' ; system('touch /tmp/owned') ; ',1,15000,9800.5,0.61,0.80,3.10,120\n");
  auto injected = run_command(gridnode, {"plot", crafted.path.string(), "--out", out.string()}, 60s);
  CHECK(injected.exit_code == 2);
  CHECK(injected.output.find("is not plain") != std::string::npos);
  std::filesystem::remove_all(out);
}

TEST_CASE("a node's /metrics answers over HTTP while it runs (metrics.listen)") {
  // Each thread of a gridnode process needs its static TLS on its stack: 70 KB of it once kept the Prometheus
  // endpoint's threads, made with a small fixed stack, from starting (error: ... null context ...).
  TempFile file("cluster:\n  listen: 127.0.0.1:0\nlearner:\n  kind: probe\n  probe_floats: 100\n"
                "metrics:\n  listen: 127.0.0.1:0\n");
  auto started = gridtrain::testing::ChildProcess::start(gridnode, {"run", "--config", file.path.string()});
  REQUIRE(started.ok());
  auto node = std::move(started).value();
  const auto line = node->wait_for_line("metrics on 127.0.0.1:", 30s);
  REQUIRE_MESSAGE(line.has_value(), node->output());
  const auto colon = line->rfind(':');
  const int port = std::stoi(line->substr(colon + 1));
  std::string page;
  CHECK(gridtrain::testing::eventually(
      [&] {
        auto r = run_command("/usr/bin/env",
                             {"curl", "-s", "--max-time", "5", "http://127.0.0.1:" + std::to_string(port) + "/metrics"},
                             10s);
        page = r.output;
        // The counters of each dimension appear with the node's first stats, a second after it started.
        return r.exit_code == 0 && page.find("gridtrain_connections_accepted_total") != std::string::npos &&
               page.find("gridtrain_rounds_total{dim=\"0\"") != std::string::npos;
      },
      20s));
  // A second node given the same metrics port: bad input, said with the system's reason before the node joins
  // (it was CivetWeb's "null context when constructing CivetServer", after the node had joined and had to leave).
  auto taken = run_command(gridnode, {"run", "--config", file.path.string(), "--set",
                                      "metrics.listen=127.0.0.1:" + std::to_string(port)},
                           30s);
  INFO(taken.output);
  CHECK(taken.exit_code == 2);
  CHECK(taken.output.rfind("error: 127.0.0.1:" + std::to_string(port) +
                               ": metrics.listen: cannot listen: Address already in use",
                           0) == 0);
  CHECK(taken.output.find("listening on") == std::string::npos);
  node->signal(SIGTERM);
  CHECK(node->wait_exit(30s) == 0);
}
