#include "learner/idx.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <limits>
#include <optional>
#include <system_error>
#include <utility>

namespace gridtrain::learner {

namespace {


constexpr std::uint8_t type_u8 = 0x08;
constexpr std::size_t magic_bytes = 4;
// zlib's read calls take an unsigned count and return an int; stay well inside both.
constexpr std::size_t max_read = std::size_t{1} << 30;
// Memory for gzip data grows from this as it arrives, unless the gzip trailer gives a better first guess.
constexpr std::size_t first_chunk = std::size_t{1} << 20;
// Trailing garbage is counted up to this much, then reported as "at least".
constexpr std::size_t trailing_count_limit = std::size_t{1} << 24;

std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

std::string hex_byte(std::uint8_t b) {
  static const char digits[] = "0123456789abcdef";
  return std::string("0x") + digits[b >> 4] + digits[b & 0xf];
}

const char* type_name(std::uint8_t type) {
  switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0b: return "int16";
    case 0x0c: return "int32";
    case 0x0d: return "float32";
    case 0x0e: return "float64";
    default: return "not an IDX type";
  }
}

std::string dims_text(const std::vector<std::uint32_t>& dims) {
  std::string out;
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? " x " : "") + std::to_string(dims[i]);
  return out;
}

// One open IDX file: the zlib stream over it, and what errors need to say where they are.
class IdxFile {
 public:
  IdxFile(std::string path, std::string_view key) : path_(std::move(path)), key_(key) {}
  IdxFile(const IdxFile&) = delete;
  IdxFile& operator=(const IdxFile&) = delete;
  ~IdxFile() {
    if (gz_) gzclose(gz_);
  }

  Error error(std::string message) const { return Error{.source = path_, .key = key_, .message = std::move(message)}; }

  Status open() {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return error("cannot open for reading: " + errno_text(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int e = errno;
      ::close(fd);
      return error("cannot stat: " + errno_text(e));
    }
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      return error("is a directory, expected an IDX file");
    }
    if (S_ISREG(st.st_mode)) file_bytes_ = static_cast<std::size_t>(st.st_size);
    fd_ = fd;
    gz_ = gzdopen(fd, "rb");  // owns fd from here, reads gzip or plain alike
    if (!gz_) {
      ::close(fd);
      return error("cannot open for reading: out of memory");
    }
    gzbuffer(gz_, 1u << 18);
    return {};
  }

  // Reads up to n bytes into out; fewer only at the end of the data. A corrupt gzip stream is an error; a gzip
  // stream cut short reads as the end of the data (truncated() says so afterwards).
  Result<std::size_t> read(void* out, std::size_t n) {
    std::size_t have = 0;
    while (have < n) {
      const auto want = static_cast<unsigned>(std::min(n - have, max_read));
      const int got = gzread(gz_, static_cast<char*>(out) + have, want);
      if (got < 0) return stream_error();
      if (got == 0) break;
      have += static_cast<std::size_t>(got);
      offset_ += static_cast<std::size_t>(got);
    }
    return have;
  }

  // Whether the data ended because a gzip stream was cut short.
  bool truncated() const {
    int code = Z_OK;
    gzerror(gz_, &code);
    return code == Z_BUF_ERROR;
  }

  // Plain files only: the whole file's size, known before reading. nullopt for gzip or non-regular files.
  // REQUIRES: something was read (zlib decides between gzip and plain on the first read).
  std::optional<std::size_t> plain_size() const {
    if (!file_bytes_ || gzdirect(gz_) == 0) return std::nullopt;
    return file_bytes_;
  }

  // Gzip only: the uncompressed size that the (last) gzip trailer claims, mod 2^32. A hint for allocation, never
  // trusted: a second gzip member or a corrupt trailer makes it wrong.
  std::size_t gzip_size_hint() const {
    std::array<unsigned char, 4> b{};
    if (!file_bytes_ || *file_bytes_ < 18) return 0;
    if (::pread(fd_, b.data(), b.size(), static_cast<off_t>(*file_bytes_ - 4)) != 4) return 0;
    const std::size_t hint =
        std::size_t{b[0]} | std::size_t{b[1]} << 8 | std::size_t{b[2]} << 16 | std::size_t{b[3]} << 24;
    // Deflate expands at most about 1032:1; a larger claim is corrupt.
    return hint / 1032 > *file_bytes_ ? 0 : hint;
  }

  std::size_t offset() const { return offset_; }

 private:
  Error stream_error() const {
    int code = Z_OK;
    const char* text = gzerror(gz_, &code);
    if (code == Z_ERRNO) return error("read error at offset " + std::to_string(offset_) + ": " + errno_text(errno));
    if (code == Z_MEM_ERROR) return error("out of memory while decompressing");
    std::string_view reason = text ? text : "unknown zlib error";
    // zlib names the stream "<fd:N>: " before its reason; the path is already the error's source.
    if (reason.starts_with("<fd:") && reason.find(": ") != std::string_view::npos)
      reason.remove_prefix(reason.find(": ") + 2);
    return error("corrupt gzip stream near uncompressed offset " + std::to_string(offset_) + ": " +
                 std::string(reason));
  }

  std::string path_;
  std::string key_;
  int fd_ = -1;
  gzFile gz_ = nullptr;
  std::optional<std::size_t> file_bytes_;
  std::size_t offset_ = 0;
};

}  // namespace

void prefer_huge_pages(void* data, std::size_t bytes) {
  constexpr std::uintptr_t huge = std::uintptr_t{2} << 20;
  const auto begin = (reinterpret_cast<std::uintptr_t>(data) + huge - 1) & ~(huge - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(data) + bytes) & ~(huge - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

Result<IdxArray> read_idx(const std::string& path, std::string_view key) {
  IdxFile file(path, key);
  if (Status s = file.open(); !s) return s.error();
  const std::string header_layout = "(a 4-byte magic 00 00 08 NN, then N big-endian 4-byte extents)";

  // 1. The magic: two zero bytes, the element type, the number of dimensions.
  std::array<std::uint8_t, magic_bytes> magic{};
  Result<std::size_t> got = file.read(magic.data(), magic.size());
  if (!got) return got.error();
  if (got.value() == 0)
    return file.error(file.truncated() ? "truncated gzip stream: it ends before any data (file truncated?)"
                                       : "empty file: expected an IDX header " + header_layout);
  if (got.value() < magic.size())
    return file.error("truncated header: expected a 4-byte magic, found " + std::to_string(got.value()) +
                      " bytes" + (file.truncated() ? " (gzip stream cut short)" : ""));
  if (magic[0] != 0 || magic[1] != 0)
    return file.error("bad magic " + hex_byte(magic[0]) + hex_byte(magic[1]).substr(2) +
                      hex_byte(magic[2]).substr(2) + hex_byte(magic[3]).substr(2) +
                      ": expected an IDX file, whose first two bytes are zero (MNIST images: 0x00000803, labels: "
                      "0x00000801)");
  if (magic[2] != type_u8)
    return file.error("unsupported IDX element type " + hex_byte(magic[2]) + " (" + type_name(magic[2]) +
                      "): only 0x08 (unsigned byte) is supported");
  const std::size_t rank = magic[3];
  if (rank == 0) return file.error("the magic declares 0 dimensions: expected at least 1");

  // 2. The extents, big-endian.
  const std::size_t header_bytes = magic_bytes + 4 * rank;
  std::vector<std::uint8_t> raw(4 * rank);
  got = file.read(raw.data(), raw.size());
  if (!got) return got.error();
  if (got.value() < raw.size())
    return file.error("truncated header: expected " + std::to_string(header_bytes) + " bytes (the magic and " +
                      std::to_string(rank) + " extents), found " + std::to_string(magic_bytes + got.value()) +
                      (file.truncated() ? " (gzip stream cut short)" : ""));
  IdxArray array;
  array.dims.resize(rank);
  std::size_t expected = 1;
  bool overflow = false;
  for (std::size_t i = 0; i < rank; ++i) {
    array.dims[i] = std::uint32_t{raw[4 * i]} << 24 | std::uint32_t{raw[4 * i + 1]} << 16 |
                    std::uint32_t{raw[4 * i + 2]} << 8 | std::uint32_t{raw[4 * i + 3]};
    if (array.dims[i] != 0 && expected > std::numeric_limits<std::size_t>::max() / array.dims[i]) overflow = true;
    expected *= array.dims[i];
  }
  if (overflow) return file.error("extents " + dims_text(array.dims) + " describe more bytes than memory can hold");
  const std::string expected_text = "expected " + std::to_string(expected) + " bytes of data (" +
                                    dims_text(array.dims) + ") after the " + std::to_string(header_bytes) +
                                    "-byte header, found ";

  // 3. The data. A plain file's size is known up front, so its mismatch is reported before reading anything.
  if (const auto size = file.plain_size()) {
    const std::size_t found = *size > header_bytes ? *size - header_bytes : 0;
    if (found < expected) return file.error(expected_text + std::to_string(found) + " (file truncated?)");
    if (found > expected)
      return file.error(expected_text + std::to_string(found) + ": " + std::to_string(found - expected) +
                        " trailing bytes from offset " + std::to_string(header_bytes + expected));
    array.data.reserve(expected);
    prefer_huge_pages(array.data.data(), expected);
    array.data.resize(expected);
  } else {
    const std::size_t hint = file.gzip_size_hint();
    array.data.reserve(std::min(expected, hint > header_bytes ? hint - header_bytes : first_chunk));
    prefer_huge_pages(array.data.data(), array.data.capacity());
    array.data.resize(array.data.capacity());
  }
  std::size_t have = 0;
  while (have < expected) {
    if (have == array.data.size())
      array.data.resize(std::min(expected, std::max(first_chunk, 2 * array.data.size())));
    got = file.read(array.data.data() + have, array.data.size() - have);
    if (!got) return got.error();
    if (got.value() == 0) break;
    have += got.value();
  }
  if (have < expected)
    return file.error(expected_text + std::to_string(have) +
                      (file.truncated() ? " (gzip stream cut short: file truncated?)" : " (file truncated?)"));

  // 4. Nothing after the data. Reading on also makes zlib check the gzip trailer's CRC and length.
  std::array<std::uint8_t, 4096> scratch{};
  std::size_t trailing = 0;
  while (trailing < trailing_count_limit) {
    got = file.read(scratch.data(), scratch.size());
    if (!got) return got.error();
    if (got.value() == 0) break;
    trailing += got.value();
  }
  if (trailing > 0)
    return file.error(expected_text + (trailing >= trailing_count_limit ? "at least " : "") +
                      std::to_string(expected + trailing) + ": " + std::to_string(trailing) +
                      " trailing bytes from offset " + std::to_string(header_bytes + expected));
  // All the data came, but a gzip stream cut inside its trailer has not been checked against its CRC.
  if (file.truncated())
    return file.error("the gzip stream ends before its trailer (CRC and length) after all " +
                      std::to_string(header_bytes + expected) + " bytes of data: file truncated?");
  return array;
}

Status write_idx(const std::string& path, const IdxArray& array, IdxCompression compression) {
  auto error = [&](std::string message) { return Error{.source = path, .message = std::move(message)}; };
  std::size_t expected = 1;
  for (std::uint32_t d : array.dims) expected *= d;
  if (array.dims.empty() || array.dims.size() > 255 || expected != array.data.size())
    return error("cannot write IDX: " + std::to_string(array.data.size()) + " bytes do not fill extents " +
                 dims_text(array.dims));

  std::vector<std::uint8_t> header = {0, 0, type_u8, static_cast<std::uint8_t>(array.dims.size())};
  for (std::uint32_t d : array.dims)
    for (int shift = 24; shift >= 0; shift -= 8) header.push_back(static_cast<std::uint8_t>(d >> shift));

  // "T" makes zlib write the bytes as they are: one code path for both.
  gzFile gz = gzopen(path.c_str(), compression == IdxCompression::gzip ? "wb6" : "wbT");
  if (!gz) return error("cannot open for writing: " + errno_text(errno));
  bool ok = true;
  for (const std::vector<std::uint8_t>* part : {&std::as_const(header), &array.data}) {
    for (std::size_t done = 0; ok && done < part->size();) {
      const auto n = static_cast<unsigned>(std::min(part->size() - done, max_read));
      ok = gzwrite(gz, part->data() + done, n) == static_cast<int>(n);
      done += n;
    }
  }
  int code = Z_OK;
  const std::string text = ok ? "" : gzerror(gz, &code);
  const int saved_errno = errno;
  const int closed = gzclose(gz);
  if (!ok) return error("write failed: " + (code == Z_ERRNO ? errno_text(saved_errno) : text));
  if (closed != Z_OK) return error("write failed on close: " + errno_text(errno));
  return {};
}

}  // namespace gridtrain::learner
