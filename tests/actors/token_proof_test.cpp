#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "actors/token_proof.hpp"

namespace gridtrain::actors {

TEST_CASE("a token proof is HMAC-SHA-256 of \"gridtrain-join/\" and the little-endian node id, keyed by the token") {
  // Computed apart from gridtrain: python3 -c "import hmac, hashlib, struct;
  //   print(hmac.new(KEY, b'gridtrain-join/' + struct.pack('<Q', ID), hashlib.sha256).hexdigest())"
  CHECK(token_proof("s3cret", 42) == "bdcf06c7f6512872de58ed160f5c4ec1b58415096693087747b7415bfe71a1e5");
  // A key longer than SHA-256's block is hashed first (RFC 2104).
  CHECK(token_proof(std::string(131, '\xaa'), 0x0123456789abcdefull) ==
        "e55cb471cc6a1e2693521e02ed351953f2c9eb9b4b5939305b470f111dc5227b");
}

TEST_CASE("a token proof is bound to the token and to the node id, and never contains the token") {
  const std::string proof = token_proof("s3cret", 42);
  CHECK(proof.size() == 64);
  CHECK(proof.find("s3cret") == std::string::npos);
  CHECK(token_proof_matches("s3cret", 42, proof));
  CHECK_FALSE(token_proof_matches("s3cret", 43, proof));
  CHECK_FALSE(token_proof_matches("other", 42, proof));
  CHECK_FALSE(token_proof_matches("s3cret", 42, proof.substr(1)));
  CHECK_FALSE(token_proof_matches("s3cret", 42, ""));
}

TEST_CASE("without a token the proof is empty, and an empty proof does not pass for a cluster with a token") {
  CHECK(token_proof("", 42).empty());
  CHECK(token_proof_matches("", 42, ""));
  CHECK_FALSE(token_proof_matches("s3cret", 42, ""));
  CHECK_FALSE(token_proof_matches("", 42, token_proof("s3cret", 42)));
}

TEST_CASE("a token file is read without its trailing newline; a missing or empty one is an error") {
  const auto dir = std::filesystem::temp_directory_path() / ("gridtrain-token-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "token") << "s3cret\n";
  std::ofstream(dir / "empty") << "\n";
  auto token = read_token((dir / "token").string());
  REQUIRE(token.ok());
  CHECK(token.value() == "s3cret");
  CHECK(read_token("").value().empty());
  CHECK_FALSE(read_token((dir / "empty").string()).ok());
  const auto missing = read_token((dir / "missing").string());
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().key == "cluster.token_file");
  std::filesystem::remove_all(dir);
}

}  // namespace gridtrain::actors
