#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "actors/token_proof.hpp"

namespace gridtrain::actors {

TEST_CASE("sha256 matches the FIPS 180-4 examples") {
  CHECK(to_hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(to_hex(sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(to_hex(sha256(std::string(1000000, 'a'))) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("hmac_sha256 matches RFC 4231") {
  CHECK(to_hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // A key longer than the block is hashed first (test case 6).
  CHECK(to_hex(hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
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
