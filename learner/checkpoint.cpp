#include "learner/checkpoint.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <span>
#include <system_error>

namespace gridtrain::learner {

namespace {


// The format is little-endian and the floats go to disk as they lie in memory.
static_assert(std::endian::native == std::endian::little, "checkpoint I/O assumes a little-endian host");

constexpr std::array<char, 8> magic = {'G', 'R', 'I', 'D', 'C', 'K', 'P', 'T'};
constexpr std::size_t header_bytes = 72;
constexpr std::size_t header_bytes_v1 = 64;  // version 1: no outer state
constexpr std::size_t checksum_bytes = 4;

std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

std::string hex(std::uint64_t v, int digits) {
  static const char d[] = "0123456789abcdef";
  std::string out = "0x";
  for (int i = digits - 1; i >= 0; --i) out += d[(v >> (4 * i)) & 0xf];
  return out;
}

void put_u32(std::uint8_t* p, std::uint32_t v) { std::memcpy(p, &v, 4); }
void put_u64(std::uint8_t* p, std::uint64_t v) { std::memcpy(p, &v, 8); }
std::uint32_t get_u32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
std::uint64_t get_u64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::span<const std::uint8_t> bytes_of(const auto& v) {
  return {reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(v[0])};
}
std::span<std::uint8_t> bytes_of(auto& v) {
  return {reinterpret_cast<std::uint8_t*>(v.data()), v.size() * sizeof(v[0])};
}

std::uint32_t crc_update(std::uint32_t crc, std::span<const std::uint8_t> bytes) {
  // zlib answers a null buffer with the initial CRC, 0, dropping what came before: an empty part (no RNG
  // state, no optimizer state for sgd) has a null data() and must leave the running CRC alone.
  if (bytes.empty()) return crc;
  return static_cast<std::uint32_t>(crc32_z(crc, bytes.data(), bytes.size()));
}

// Closes a descriptor on scope exit unless released.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// write(2) until everything is written; errno on failure.
bool write_all(int fd, std::span<const std::uint8_t> bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), std::min<std::size_t>(bytes.size(), std::size_t{1} << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return true;
}

// read(2) until n bytes or the end of the file; the count read, or -1 with errno.
ssize_t read_all(int fd, std::span<std::uint8_t> bytes) {
  std::size_t have = 0;
  while (have < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + have, std::min<std::size_t>(bytes.size() - have, std::size_t{1} << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) break;
    have += static_cast<std::size_t>(n);
  }
  return static_cast<ssize_t>(have);
}

}  // namespace

Status write_checkpoint(const std::string& path, const CheckpointData& data) {
  auto error = [&](std::string message) { return Error{.source = path, .message = std::move(message)}; };
  const std::string kept = " (any previous checkpoint is unchanged)";

  std::array<std::uint8_t, header_bytes> header{};
  std::memcpy(header.data(), magic.data(), magic.size());
  put_u32(header.data() + 8, checkpoint_version);
  put_u64(header.data() + 16, data.signature);
  put_u64(header.data() + 24, data.step);
  put_u64(header.data() + 32, data.epoch);
  put_u64(header.data() + 40, data.params.size());
  put_u64(header.data() + 48, data.optimizer_state.size());
  put_u64(header.data() + 56, data.rng_state.size());
  put_u64(header.data() + 64, data.outer_state.size());
  const std::array<std::span<const std::uint8_t>, 5> parts = {
      std::span<const std::uint8_t>(header), bytes_of(data.params), bytes_of(data.optimizer_state),
      bytes_of(data.rng_state), bytes_of(data.outer_state)};
  std::uint32_t crc = 0;
  for (auto part : parts) crc = crc_update(crc, part);
  std::array<std::uint8_t, checksum_bytes> trailer{};
  put_u32(trailer.data(), crc);

  // 1. A temporary file beside the target, so that the rename below stays within one file system.
  std::string temp = path + ".tmp.XXXXXX";
  Fd file{::mkstemp(temp.data())};
  if (file.fd < 0) return error("cannot create a temporary file beside it: " + errno_text(errno) + kept);
  auto fail = [&](const std::string& what) {
    const int saved = errno;
    const Error e = error(what + ": " + errno_text(saved) + kept);
    ::close(file.fd);
    file.fd = -1;
    ::unlink(temp.c_str());
    return e;
  };

  // 2. The bytes, then fsync: the data must be on disk before the name points at it.
  for (auto part : parts)
    if (!write_all(file.fd, part)) return fail("write failed");
  if (!write_all(file.fd, trailer)) return fail("write failed");
  if (::fsync(file.fd) != 0) return fail("fsync failed");
  const int closed = ::close(file.fd);
  file.fd = -1;
  if (closed != 0) {
    const int saved = errno;
    const Error e = error("close failed: " + errno_text(saved) + kept);
    ::unlink(temp.c_str());
    return e;
  }

  // 3. Rename over the target: atomic, so readers see the old file or the new one, never a mix.
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    const Error e = error("cannot rename the temporary file over it: " + errno_text(saved) + kept);
    ::unlink(temp.c_str());
    return e;
  }

  // 4. fsync the directory, so that the rename itself survives a crash.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  Fd dir_fd{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (dir_fd.fd < 0 || ::fsync(dir_fd.fd) != 0)
    return error("written, but syncing its directory failed: " + errno_text(errno) +
                 " (the new checkpoint may not survive a crash)");
  return {};
}

Result<CheckpointData> read_checkpoint(const std::string& path, std::uint64_t expected_signature) {
  auto error = [&](std::string message) { return Error{.source = path, .message = std::move(message)}; };

  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) return error("cannot open checkpoint for reading: " + errno_text(errno));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) return error("cannot stat checkpoint: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) return error("not a regular file, expected a checkpoint");
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);

  // 1. Magic, version, then sizes: each says more precisely what this file is than the checksum would.
  std::array<std::uint8_t, header_bytes> header{};
  const ssize_t got = read_all(file.fd, std::span<std::uint8_t>(header).first(header_bytes_v1));
  if (got < 0) return error("read error: " + errno_text(errno));
  const auto have = static_cast<std::size_t>(got);
  if (have == 0) return error("empty file: expected a checkpoint");
  if (std::memcmp(header.data(), magic.data(), std::min(have, magic.size())) != 0)
    return error("bad magic: not a gridtrain checkpoint (expected it to start with \"GRIDCKPT\")");
  if (have < header_bytes_v1 || file_bytes < header_bytes_v1 + checksum_bytes)
    return error("truncated checkpoint: expected at least " + std::to_string(header_bytes_v1 + checksum_bytes) +
                 " bytes (header and checksum), found " + std::to_string(file_bytes));
  const std::uint32_t version = get_u32(header.data() + 8);
  if (version != checkpoint_version && version != 1)
    return error("unsupported checkpoint format version " + std::to_string(version) + ": expected 1 or " +
                 std::to_string(checkpoint_version));
  // Version 2's header holds one more field, the outer state's size.
  const std::size_t header_size = version == 1 ? header_bytes_v1 : header_bytes;
  if (header_size > header_bytes_v1) {
    if (file_bytes < header_size + checksum_bytes)
      return error("truncated checkpoint: expected at least " + std::to_string(header_size + checksum_bytes) +
                   " bytes (header and checksum), found " + std::to_string(file_bytes));
    const ssize_t more = read_all(file.fd, std::span<std::uint8_t>(header).subspan(header_bytes_v1));
    if (more < 0) return error("read error: " + errno_text(errno));
    if (static_cast<std::size_t>(more) != header_size - header_bytes_v1)
      return error("truncated checkpoint: the file shrank while it was read");
  }
  if (get_u32(header.data() + 12) != 0) return error("corrupt checkpoint: reserved header field is not 0");

  CheckpointData out;
  out.signature = get_u64(header.data() + 16);
  out.step = get_u64(header.data() + 24);
  out.epoch = get_u64(header.data() + 32);
  const std::uint64_t params = get_u64(header.data() + 40);
  const std::uint64_t optimizer = get_u64(header.data() + 48);
  const std::uint64_t rng = get_u64(header.data() + 56);
  const std::uint64_t outer = version == 1 ? 0 : get_u64(header.data() + 64);
  // The sizes must account for the file exactly; checked before anything is allocated.
  const std::uint64_t limit = file_bytes;
  const bool fits = params <= limit / 4 && optimizer <= limit / 4 && rng <= limit && outer <= limit / 4;
  const std::uint64_t expected = header_size + 4 * params + 4 * optimizer + rng + 4 * outer + checksum_bytes;
  if (!fits || expected != file_bytes)
    return error(std::string(!fits || expected > file_bytes ? "truncated or corrupt" : "corrupt") +
                 " checkpoint: the header describes " + std::to_string(params) + " parameter floats, " +
                 std::to_string(optimizer) + " optimizer floats, " + std::to_string(rng) + " RNG bytes and " +
                 std::to_string(outer) + " outer-state floats, which need " +
                 (fits ? std::to_string(expected) : std::string("more")) + " bytes, but the file holds " +
                 std::to_string(file_bytes));
  if (outer != 0 && outer != 2 * params)
    return error("corrupt checkpoint: " + std::to_string(outer) + " outer-state floats, expected 0 or twice the " +
                 std::to_string(params) + " parameter floats");

  // 2. The body, checksummed as it is read.
  out.params.resize(params);
  out.optimizer_state.resize(optimizer);
  out.rng_state.resize(rng);
  out.outer_state.resize(outer);
  std::array<std::uint8_t, checksum_bytes> trailer{};
  std::uint32_t crc = crc_update(0, std::span<const std::uint8_t>(header).first(header_size));
  for (std::span<std::uint8_t> part : {bytes_of(out.params), bytes_of(out.optimizer_state), bytes_of(out.rng_state),
                                       bytes_of(out.outer_state), std::span<std::uint8_t>(trailer)}) {
    const ssize_t n = read_all(file.fd, part);
    if (n < 0) return error("read error: " + errno_text(errno));
    if (static_cast<std::size_t>(n) != part.size())
      return error("truncated checkpoint: the file shrank while it was read");
    if (part.data() != trailer.data()) crc = crc_update(crc, part);
  }
  const std::uint32_t stored = get_u32(trailer.data());
  if (stored != crc)
    return error("checksum mismatch: the file says " + hex(stored, 8) + ", its content gives " + hex(crc, 8) +
                 " (corrupt checkpoint)");

  // 3. Only now is the signature known to be what was written.
  if (out.signature != expected_signature)
    return error("model signature " + hex(out.signature, 16) + " does not match this model's " +
                 hex(expected_signature, 16) + ": the checkpoint is of another model");
  return out;
}

Result<CheckpointClaim> CheckpointClaim::claim(const std::string& checkpoint_path) {
  const std::string lock_path = checkpoint_path + ".lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return Error{.source = checkpoint_path, .message = "cannot create its lock file " + lock_path + ": " +
                                                       errno_text(errno)};
  CheckpointClaim claim(fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int saved = errno;
    if (saved != EWOULDBLOCK)
      return Error{.source = checkpoint_path, .message = "cannot lock " + lock_path + ": " + errno_text(saved)};
    char text[32] = {};
    const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
    const std::string holder = n > 0 ? "process " + std::string(text, static_cast<std::size_t>(n)) : "another process";
    return Error{.source = checkpoint_path,
                 .message = "in use by another node (" + holder +
                            "): give each node that shares checkpoint.dir its own --name (the default is the listen "
                            "port)"};
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
    return Error{.source = checkpoint_path, .message = "cannot write " + lock_path + ": " + errno_text(errno)};
  return claim;
}

CheckpointClaim& CheckpointClaim::operator=(CheckpointClaim&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

CheckpointClaim::~CheckpointClaim() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace gridtrain::learner
