#include "learner/checkpoint.hpp"

#include <doctest/doctest.h>

#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/config/temp_dir.hpp"
#include "tests/learner/idx_files.hpp"

using gridtrain::config::testing::TempDir;
using gridtrain::learner::checkpoint_version;
using gridtrain::learner::CheckpointClaim;
using gridtrain::learner::CheckpointData;
using gridtrain::learner::read_checkpoint;
using gridtrain::learner::write_checkpoint;
using gridtrain::learner::testing::read_bytes;
using gridtrain::learner::testing::write_bytes;

namespace {

constexpr std::uint64_t signature = 0xaab904d55491de14ull;

CheckpointData sample(std::size_t params = 6) {
  CheckpointData d;
  d.signature = signature;
  d.step = 12345;
  d.epoch = 3;
  for (std::size_t i = 0; i < params; ++i) d.params.push_back(0.25f * static_cast<float>(i) - 1.0f);
  d.optimizer_state = {0.5f, -0.5f, 1e-7f};
  d.rng_state = {1, 2, 3, 250};
  return d;
}

// The files in `dir`, by name: to see that a failed write leaves no temporary file behind.
std::vector<std::string> files_in(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string read_error(const std::filesystem::path& path, std::uint64_t expected = signature) {
  auto r = read_checkpoint(path.string(), expected);
  return r ? "" : r.error().message;
}

// Rewrites the CRC at the end of `bytes` to match its content, so a test can change one field and nothing else.
void fix_checksum(std::string& bytes) {
  const auto crc = static_cast<std::uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size() - 4)));
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
}

// Lowers the file-size limit for one scope, so that writes past it fail with EFBIG, as on a full disk.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);  // else the kernel kills the process instead of failing write
    rlimit lower = saved_;
    lower.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lower) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*old_handler_)(int) = nullptr;
};

}  // namespace

TEST_CASE("a checkpoint reads back exactly what was written") {
  TempDir dir;
  const auto path = dir.path() / "node.ckpt";
  CheckpointData outer = sample();
  for (std::size_t i = 0; i < 2 * outer.params.size(); ++i) outer.outer_state.push_back(static_cast<float>(i) / 3);
  for (const CheckpointData& d : {sample(), sample(0), CheckpointData{.signature = signature}, outer}) {
    REQUIRE(write_checkpoint(path.string(), d));
    auto r = read_checkpoint(path.string(), signature);
    REQUIRE(r.ok());
    CHECK(r.value() == d);
  }
  // Header, 6 + 3 floats, 4 RNG bytes, checksum.
  REQUIRE(write_checkpoint(path.string(), sample()));
  CHECK(std::filesystem::file_size(path) == 72 + 4 * 9 + 4 + 4);
  CHECK(read_bytes(path).substr(0, 8) == "GRIDCKPT");
  CHECK(files_in(dir.path()) == std::vector<std::string>{"node.ckpt"});
}

TEST_CASE("a second checkpoint replaces the first") {
  TempDir dir;
  const auto path = (dir.path() / "c").string();
  REQUIRE(write_checkpoint(path, sample(100)));
  CheckpointData later = sample(3);
  later.step = 99999;
  REQUIRE(write_checkpoint(path, later));
  auto r = read_checkpoint(path, signature);
  REQUIRE(r.ok());
  CHECK(r.value() == later);
}

TEST_CASE("a checkpoint with any one byte flipped is refused") {
  TempDir dir;
  const auto path = dir.path() / "c";
  REQUIRE(write_checkpoint(path.string(), sample()));
  const std::string good = read_bytes(path);
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      write_bytes(path, bad);
      CAPTURE(i);
      CAPTURE(bit);
      CHECK_FALSE(read_error(path).empty());
    }
  }
  // Where the flip lands decides what is said.
  std::string bad = good;
  bad[78] = static_cast<char>(bad[78] ^ 0x10);
  write_bytes(path, bad);
  CHECK(read_error(path).starts_with("checksum mismatch: the file says 0x"));
  CHECK(read_error(path).ends_with(" (corrupt checkpoint)"));
  bad = good;
  bad[0] = 'g';
  write_bytes(path, bad);
  CHECK(read_error(path) == "bad magic: not a gridtrain checkpoint (expected it to start with \"GRIDCKPT\")");
  bad = good;
  bad[40] = 7;  // parameter count 6 -> 7
  write_bytes(path, bad);
  CHECK(read_error(path) ==
        "truncated or corrupt checkpoint: the header describes 7 parameter floats, 3 optimizer floats, 4 RNG "
        "bytes and 0 outer-state floats, which need 120 bytes, but the file holds 116");
}

TEST_CASE("a checkpoint cut short anywhere is refused as truncated") {
  TempDir dir;
  const auto path = dir.path() / "c";
  REQUIRE(write_checkpoint(path.string(), sample()));
  const std::string good = read_bytes(path);
  CHECK(read_error(path).empty());
  for (std::size_t n = 1; n < good.size(); ++n) {
    write_bytes(path, good.substr(0, n));
    CAPTURE(n);
    CHECK(read_error(path).find("truncated") != std::string::npos);
  }
  write_bytes(path, good.substr(0, 20));
  CHECK(read_error(path) == "truncated checkpoint: expected at least 68 bytes (header and checksum), found 20");
  write_bytes(path, good.substr(0, 70));  // a version 2 header is 72 bytes
  CHECK(read_error(path) == "truncated checkpoint: expected at least 76 bytes (header and checksum), found 70");
  write_bytes(path, "");
  CHECK(read_error(path) == "empty file: expected a checkpoint");
  write_bytes(path, good + "x");
  CHECK(read_error(path).starts_with("corrupt checkpoint: the header describes"));
}

TEST_CASE("a checkpoint of another model is refused by its signature") {
  TempDir dir;
  const auto path = dir.path() / "c";
  REQUIRE(write_checkpoint(path.string(), sample()));
  auto r = read_checkpoint(path.string(), 0x1234);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().source == path.string());
  CHECK(r.error().message ==
        "model signature 0xaab904d55491de14 does not match this model's 0x0000000000001234: the checkpoint is of "
        "another model");
}

TEST_CASE("a checkpoint of another format version is refused, even with a valid checksum") {
  TempDir dir;
  const auto path = dir.path() / "c";
  REQUIRE(write_checkpoint(path.string(), sample()));
  std::string bytes = read_bytes(path);
  const std::uint32_t next = checkpoint_version + 1;
  std::memcpy(bytes.data() + 8, &next, 4);
  fix_checksum(bytes);
  write_bytes(path, bytes);
  CHECK(read_error(path) == "unsupported checkpoint format version 3: expected 1 or 2");
}

TEST_CASE("a version 1 checkpoint (before the outer step) still reads, with no outer state") {
  TempDir dir;
  const auto path = dir.path() / "c";
  REQUIRE(write_checkpoint(path.string(), sample()));
  // Version 1: the same file without the header's last field.
  std::string bytes = read_bytes(path);
  bytes.erase(64, 8);
  const std::uint32_t one = 1;
  std::memcpy(bytes.data() + 8, &one, 4);
  fix_checksum(bytes);
  write_bytes(path, bytes);
  auto r = read_checkpoint(path.string(), signature);
  REQUIRE(r.ok());
  CHECK(r.value() == sample());
}

TEST_CASE("outer state other than none or twice the parameters is refused") {
  TempDir dir;
  const auto path = dir.path() / "c";
  CheckpointData d = sample();
  d.outer_state = {1, 2, 3};
  REQUIRE(write_checkpoint(path.string(), d));
  CHECK(read_error(path) == "corrupt checkpoint: 3 outer-state floats, expected 0 or twice the 6 parameter floats");
}

TEST_CASE("a missing checkpoint is refused with the system's reason") {
  TempDir dir;
  CHECK(read_error(dir.path() / "none") == "cannot open checkpoint for reading: No such file or directory");
  CHECK(read_error(dir.path()) == "not a regular file, expected a checkpoint");
}

TEST_CASE("a write that fails midway (file too large, as on a full disk) leaves the previous checkpoint intact") {
  TempDir dir;
  const auto path = (dir.path() / "c").string();
  const CheckpointData old = sample(10);
  REQUIRE(write_checkpoint(path, old));
  const std::string old_bytes = read_bytes(path);
  {
    FileSizeLimit limit(1000);  // the new checkpoint needs 64 + 4 * 1003 + 8 bytes
    auto s = write_checkpoint(path, sample(1000));
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().source == path);
    CHECK(s.error().message == "write failed: File too large (any previous checkpoint is unchanged)");
  }
  CHECK(read_bytes(path) == old_bytes);
  auto r = read_checkpoint(path, signature);
  REQUIRE(r.ok());
  CHECK(r.value() == old);
  CHECK(files_in(dir.path()) == std::vector<std::string>{"c"});  // the temporary file is gone
}

TEST_CASE("a checkpoint that cannot be placed fails with an error, and leaves no temporary file") {
  TempDir dir;
  auto no_dir = write_checkpoint((dir.path() / "missing" / "c").string(), sample());
  REQUIRE_FALSE(no_dir.ok());
  CHECK(no_dir.error().message ==
        "cannot create a temporary file beside it: No such file or directory (any previous checkpoint is unchanged)");

  // A directory where the file should go: the rename fails after the data is written and synced.
  std::filesystem::create_directory(dir.path() / "taken");
  std::filesystem::create_directory(dir.path() / "taken" / "inside");
  auto taken = write_checkpoint((dir.path() / "taken").string(), sample());
  REQUIRE_FALSE(taken.ok());
  CHECK(taken.error().message.starts_with("cannot rename the temporary file over it: "));
  CHECK(files_in(dir.path()) == std::vector<std::string>{"taken"});
}

TEST_CASE("a checkpoint in a read-only directory is refused (unprivileged users only)") {
  if (::geteuid() == 0) {
    MESSAGE("running as root, which may write anywhere; skipped");
    return;
  }
  TempDir dir;
  const auto path = (dir.path() / "c").string();
  REQUIRE(write_checkpoint(path, sample()));
  std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  auto s = write_checkpoint(path, sample(50));
  std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().message ==
        "cannot create a temporary file beside it: Permission denied (any previous checkpoint is unchanged)");
  CHECK(read_checkpoint(path, signature).value() == sample());
}

TEST_CASE("a flipped parameter byte is refused when the RNG and optimizer states are empty") {
  // The learner writes no RNG state, and sgd no optimizer state: empty parts must not reset the checksum.
  TempDir dir;
  const std::string path = (dir.path() / "empty-parts.ckpt").string();
  CheckpointData d = sample();
  d.rng_state.clear();
  d.optimizer_state.clear();
  REQUIRE(write_checkpoint(path, d).ok());
  REQUIRE(read_checkpoint(path, signature).ok());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[72] = static_cast<char>(bytes[72] ^ 0x01);  // the first parameter, just after the 72-byte header
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  auto read = read_checkpoint(path, signature);
  REQUIRE_FALSE(read.ok());
  CHECK(read.error().message.find("checksum") != std::string::npos);
}

TEST_CASE("one checkpoint path has one claimant at a time; the second is told whose it is") {
  // A claim is an open file with its lock, as another process's would be.
  TempDir dir;
  const std::string path = (dir.path() / "node-a.ckpt").string();
  {
    auto first = CheckpointClaim::claim(path);
    REQUIRE(first.ok());
    auto second = CheckpointClaim::claim(path);
    REQUIRE_FALSE(second.ok());
    CHECK(second.error().source == path);
    CHECK(second.error().message ==
          "in use by another node (process " + std::to_string(::getpid()) +
              "): give each node that shares checkpoint.dir its own --name (the default is the listen port)");
    CHECK(CheckpointClaim::claim((dir.path() / "node-b.ckpt").string()).ok());  // another name: no conflict
  }
  CHECK(CheckpointClaim::claim(path).ok());  // the first ended: the path is free again
  auto nowhere = CheckpointClaim::claim((dir.path() / "missing" / "node-a.ckpt").string());
  REQUIRE_FALSE(nowhere.ok());
  CHECK(nowhere.error().message.find("cannot create its lock file") == 0);
}
