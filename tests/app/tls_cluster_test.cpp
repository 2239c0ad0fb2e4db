// TLS between real gridnode processes: a cluster with certificates from its CA forms and trains on Fashion-MNIST;
// a node with another CA's certificate, without TLS, or without the token is refused with exit 3 and says why.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <thread>
#include <string>
#include <vector>

#include "tests/app/process_harness.hpp"
#include "tests/tls_certificates.hpp"

using namespace gridtrain::testing;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

const std::string gridnode = GRIDNODE_PATH;

// Writes a config for one node: the cluster's token and the TLS files of `cert` (none when `cert` is ""), the
// given learner section, and anything extra.
std::string write_config(const fs::path& at, const std::string& token_file, const TestCertificates* ca,
                         const std::string& cert, const std::string& learner) {
  std::ofstream out(at);
  out << "cluster:\n  listen: 127.0.0.1:0\n  token_file: " << token_file << "\n";
  if (ca) {
    const auto files = ca->files(cert);
    out << "  tls_certificate: " << files.certificate << "\n  tls_key: " << files.key << "\n  tls_ca: " << files.ca
        << "\n";
  }
  out << learner;
  return at.string();
}

// Starts `gridnode run` for `config` (joining `seed` unless it is ""), and returns it once it listens.
std::unique_ptr<ChildProcess> start(const std::string& config, const std::string& seed,
                                    std::vector<std::string> extra = {}) {
  std::vector<std::string> args{"run", "--config", config, "--listen", "127.0.0.1:0"};
  if (!seed.empty()) args.insert(args.end(), {"--seed", seed});
  args.insert(args.end(), extra.begin(), extra.end());
  auto started = ChildProcess::start(gridnode, args);
  REQUIRE(started.ok());
  auto node = std::move(started).value();
  REQUIRE_MESSAGE(node->wait_for_line("listening on ", 60s), node->output());
  return node;
}

std::string address_of(ChildProcess& node) {
  auto line = node.wait_for_line("listening on ", 1s);
  return line->substr(line->find("listening on ") + 13);
}

// A node that must be refused: its exit code and output.
std::pair<int, std::string> refused(const std::string& config, const std::string& seed) {
  auto node = start(config, seed);
  auto code = node->wait_exit(60s);
  REQUIRE_MESSAGE(code.has_value(), node->output());
  return {*code, node->output()};
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "gridtrain-tls-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST_CASE("with TLS on, a cluster forms and averages; another CA's certificate, no TLS, or no token: exit 3, and why") {
  TempDir dir;
  TestCertificates ours({"a", "b", "c"}), theirs({"x"});
  std::ofstream(dir.path / "token") << "tls test token\n";
  std::ofstream(dir.path / "wrong-token") << "another cluster\n";
  const std::string token = (dir.path / "token").string(), wrong = (dir.path / "wrong-token").string();
  const std::string probe = "grid: {dims: 1}\nlearner: {kind: probe, probe_floats: 10000}\n";

  auto a = start(write_config(dir.path / "a.yaml", token, &ours, "a", probe), "", {"--set", "learner.probe_value=1"});
  const std::string seed = address_of(*a);
  auto b = start(write_config(dir.path / "b.yaml", token, &ours, "b", probe), seed, {"--set", "learner.probe_value=3"});
  REQUIRE_MESSAGE(b->wait_for_line("joined the cluster", 60s), b->output());

  // Both average over TLS: their probe values meet at the mean. Status needs a certificate too.
  const auto c = ours.files("c");
  const std::vector<std::string> status{"status", "--seed", seed, "--token-file", token, "--tls-certificate",
                                        c.certificate, "--tls-key", c.key, "--tls-ca", c.ca};
  std::vector<std::string> json_status = status;
  json_status.push_back("--json");
  bool averaged = eventually(
      [&] {
        auto r = run_command(gridnode, json_status, 20s);
        if (r.exit_code != 0) return false;
        const auto view = nlohmann::json::parse(r.output, nullptr, false);
        if (!view.is_object() || view["nodes"].size() != 2) return false;
        for (const auto& n : view["nodes"])  // both at 2, the mean of 1 and 3
          if (!n["param_mean"].is_number() || std::abs(n["param_mean"].get<double>() - 2.0) > 1e-3) return false;
        return true;
      },
      60s);
  CHECK(averaged);

  SUBCASE("a certificate from another CA") {
    auto [code, output] = refused(write_config(dir.path / "x.yaml", token, &theirs, "x", probe), seed);
    INFO(output);
    CHECK(code == 3);
    CHECK(output.find("error: rejected by the cluster") != std::string::npos);
    CHECK(output.find("TLS: ") != std::string::npos);
    CHECK(output.find("certificate does not pass the check against our cluster CA") != std::string::npos);
  }
  SUBCASE("a certificate of ours that the cluster's CA did not sign, while we trust the cluster's CA") {
    // Trusts both CAs, so it takes the cluster's certificate; the cluster refuses its own.
    std::ofstream(dir.path / "both-cas.pem") << std::ifstream(ours.path("ca.pem")).rdbuf()
                                             << std::ifstream(theirs.path("ca.pem")).rdbuf();
    const std::string config = (dir.path / "x2.yaml").string();
    std::ofstream(config) << "cluster:\n  listen: 127.0.0.1:0\n  token_file: " << token
                          << "\n  tls_certificate: " << theirs.path("x.pem") << "\n  tls_key: " << theirs.path("x.key")
                          << "\n  tls_ca: " << (dir.path / "both-cas.pem").string() << "\n" << probe;
    auto [code, output] = refused(config, seed);
    INFO(output);
    CHECK(code == 3);
    CHECK(output.find("it refused our certificate") != std::string::npos);
  }
  SUBCASE("no TLS at all") {
    auto [code, output] = refused(write_config(dir.path / "plain.yaml", token, nullptr, "", probe), seed);
    INFO(output);
    CHECK(code == 3);
    CHECK(output.find("uses TLS, and this node does not") != std::string::npos);
  }
  SUBCASE("a good certificate and a wrong token") {
    auto [code, output] = refused(write_config(dir.path / "c.yaml", wrong, &ours, "c", probe), seed);
    INFO(output);
    CHECK(code == 3);
    CHECK(output.find("wrong cluster token") != std::string::npos);
    CHECK(output.find("another cluster") == std::string::npos);  // its own token, never logged
  }
  // The cluster is untouched: still two members.
  auto r = run_command(gridnode, status, 20s);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("nodes 2") != std::string::npos);
  // The token is never logged, nor shown by status (the refused nodes' outputs are checked in their subcases).
  for (const std::string& output : {a->output(), b->output(), r.output})
    CHECK(output.find("tls test token") == std::string::npos);
}

TEST_CASE("with TLS on, a peer killed or leaving mid-transfer leaves the others running: a write to its closed socket is an error, not SIGPIPE") {
  TempDir dir;
  TestCertificates ours({"a", "b", "c", "s"});
  std::ofstream(dir.path / "token") << "tls kill token\n";
  const std::string token = (dir.path / "token").string();
  // 16 MB models: every round's frames take a while to write, so the kill lands while a survivor writes to it.
  const std::string probe = "grid: {dims: 1}\nlearner: {kind: probe, probe_floats: 4194304}\n";
  auto a = start(write_config(dir.path / "a.yaml", token, &ours, "a", probe), "");
  const std::string seed = address_of(*a);
  auto b = start(write_config(dir.path / "b.yaml", token, &ours, "b", probe), seed);
  auto c = start(write_config(dir.path / "c.yaml", token, &ours, "c", probe), seed);
  const auto s = ours.files("s");
  const std::vector<std::string> status{"status", "--seed", seed, "--token-file", token, "--tls-certificate",
                                        s.certificate, "--tls-key", s.key, "--tls-ca", s.ca, "--json"};
  // Rounds of 3 going on, and how many each node has run.
  auto rounds_of = [&](std::size_t members) {
    std::vector<std::uint64_t> rounds;
    auto r = run_command(gridnode, status, 20s);
    if (r.exit_code != 0) return rounds;
    const auto view = nlohmann::json::parse(r.output, nullptr, false);
    if (!view.is_object() || view["nodes"].size() != members) return rounds;
    for (const auto& n : view["nodes"]) rounds.push_back(n["rounds_done"].get<std::uint64_t>());
    return rounds;
  };
  std::vector<std::uint64_t> before;
  REQUIRE(eventually([&] {
    before = rounds_of(3);
    return before.size() == 3 && *std::min_element(before.begin(), before.end()) > 2;
  }, 60s));

  c->signal(SIGKILL);
  c->wait_exit(10s);
  // Both survivors go on averaging with each other, alive well past the kill.
  const auto total = [](const std::vector<std::uint64_t>& r) { return std::accumulate(r.begin(), r.end(), 0ull); };
  const std::uint64_t at_kill = total(before);
  bool went_on = eventually([&] {
    auto now = rounds_of(2);
    return now.size() == 2 && total(now) > at_kill;
  }, 30s);
  std::this_thread::sleep_for(1s);
  INFO("a: " << a->output());
  INFO("b: " << b->output());
  CHECK(a->running());
  CHECK(b->running());
  CHECK(went_on);
  // Then b leaves cleanly while a still sends to it, and a stays up until it is told to stop.
  b->signal(SIGTERM);
  CHECK(b->wait_exit(30s) == std::optional<int>(0));
  std::this_thread::sleep_for(1s);
  CHECK(a->running());
  a->signal(SIGTERM);
  CHECK(a->wait_exit(30s) == std::optional<int>(0));
}

TEST_CASE("with TLS on, two nodes train on Fashion-MNIST, average over TLS, and converge") {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    MESSAGE("skipped: Fashion-MNIST is not installed (Debian's dataset-fashion-mnist)");
    return;
  }
  TempDir dir;
  TestCertificates ours({"a", "b"});
  std::ofstream(dir.path / "token") << "tls training token\n";
  const std::string token = (dir.path / "token").string();
  const std::string learner =
      "grid: {dims: 1}\nallreduce: {elastic_rate: 0.3}\n"
      "learner: {kind: model, device: cpu, threads: 1, epochs: 2, optimizer: {learning_rate: 0.04}}\n";
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  auto args = [](int i) {
    return std::vector<std::string>{"--name", std::to_string(i), "--shard-index", std::to_string(i), "--shard-count",
                                    "2", "--wait-members", "2"};
  };
  auto a = start(write_config(dir.path / "a.yaml", token, &ours, "a", learner), "", args(0));
  auto b = start(write_config(dir.path / "b.yaml", token, &ours, "b", learner), address_of(*a), args(1));
  for (ChildProcess* node : {a.get(), b.get()}) {
    auto code = node->wait_exit(300s);
    INFO(node->output());
    REQUIRE(code == 0);
    auto line = node->wait_for_line("final test_accuracy ", 1s);
    REQUIRE(line.has_value());
    const double accuracy = std::stod(line->substr(line->find("final test_accuracy ") + 20));
    MESSAGE("final test accuracy over TLS: " << accuracy);
    // One epoch of this MLP on half of Fashion-MNIST reaches about 0.8; chance is 0.1.
    CHECK(accuracy > 0.75);
    // It averaged with the other node: its epoch lines count rounds.
    auto epoch = node->wait_for_line("epoch 2 samples ", 1s);
    REQUIRE(epoch.has_value());
    const auto rounds = epoch->find(" rounds ");
    REQUIRE(rounds != std::string::npos);
    CHECK(std::stoll(epoch->substr(rounds + 8)) > 0);
  }
}
