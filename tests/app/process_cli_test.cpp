// The gridnode command line as a contract (README.md, "The command line"): exit codes and one-line errors,
// checked on the real binary.

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/app/process_harness.hpp"
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
