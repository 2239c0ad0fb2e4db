#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include "actors/token_proof.hpp"

namespace gridtrain::actors {

TEST_CASE("a token proof is HMAC-SHA-256 of \"gridtrain-join/\", node id and nonce (little-endian), keyed by the "
          "token") {
  // Computed apart from gridtrain: python3 -c "import hmac, hashlib, struct; print(hmac.new(KEY,
  //   b'gridtrain-join/' + struct.pack('<Q', ID) + struct.pack('<Q', NONCE), hashlib.sha256).hexdigest())"
  CHECK(token_proof("s3cret", 42, 7) == "8ecdaaf26101f202dc49c2e74c987b61349c559ad0b30447e8d1d962a3319d09");
  // A key longer than SHA-256's block is hashed first (RFC 2104).
  CHECK(token_proof(std::string(131, '\xaa'), 0x0123456789abcdefull, 0xfedcba9876543210ull) ==
        "77ab10f516e4d392e328e57dffa0a52ffa6329989065dae18db677804667066a");
}

TEST_CASE("a token proof is bound to the token, the node id and the nonce, and never contains the token") {
  const std::string proof = token_proof("s3cret", 42, 7);
  CHECK(proof.size() == 64);
  CHECK(proof.find("s3cret") == std::string::npos);
  CHECK(token_proof_matches("s3cret", 42, 7, proof));
  CHECK_FALSE(token_proof_matches("s3cret", 43, 7, proof));
  CHECK_FALSE(token_proof_matches("s3cret", 42, 8, proof));  // another challenge's
  CHECK_FALSE(token_proof_matches("other", 42, 7, proof));
  CHECK_FALSE(token_proof_matches("s3cret", 42, 7, proof.substr(1)));
  CHECK_FALSE(token_proof_matches("s3cret", 42, 7, ""));
}

TEST_CASE("without a token the proof is empty, and an empty proof does not pass for a cluster with a token") {
  CHECK(token_proof("", 42, 7).empty());
  CHECK(token_proof_matches("", 42, 7, ""));
  CHECK_FALSE(token_proof_matches("s3cret", 42, 7, ""));
  CHECK_FALSE(token_proof_matches("", 42, 7, token_proof("s3cret", 42, 7)));
}

TEST_CASE("join nonces are never 0 and do not repeat") {
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 10000; ++i) {
    const std::uint64_t n = make_join_nonce();
    CHECK(n != 0);
    seen.insert(n);
  }
  CHECK(seen.size() == 10000);
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
