#pragma once
// A cluster CA and node certificates for a test, made by scripts/make-certs.sh (the script users run) in a fresh
// temporary directory that goes with the object.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "dataplane/tls.hpp"

namespace gridtrain::testing {

class TestCertificates {
 public:
  explicit TestCertificates(const std::vector<std::string>& names) {
    std::string pattern = (std::filesystem::temp_directory_path() / "gridtrain-certs-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    dir = pattern;
    std::string command = std::string(GRIDTRAIN_SOURCE_DIR) + "/scripts/make-certs.sh " + dir;
    for (const std::string& name : names) command += " " + name;
    command += " >/dev/null";
    REQUIRE_MESSAGE(std::system(command.c_str()) == 0, command);
  }
  ~TestCertificates() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  TestCertificates(const TestCertificates&) = delete;
  TestCertificates& operator=(const TestCertificates&) = delete;

  std::string path(const std::string& file) const { return dir + "/" + file; }
  dataplane::TlsFiles files(const std::string& name) const {
    return {.certificate = path(name + ".pem"), .key = path(name + ".key"), .ca = path("ca.pem")};
  }
  std::shared_ptr<const dataplane::TlsContext> context(const std::string& name) const {
    auto loaded = dataplane::TlsContext::load(files(name));
    REQUIRE_MESSAGE(loaded.ok(), (loaded.ok() ? "" : loaded.error().message));
    return loaded.value();
  }

  std::string dir;
};

}  // namespace gridtrain::testing
