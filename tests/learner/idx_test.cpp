#include "learner/idx.hpp"

#include <doctest/doctest.h>

#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/config/temp_dir.hpp"
#include "tests/learner/idx_files.hpp"

using gridtrain::config::testing::TempDir;
using gridtrain::learner::IdxArray;
using gridtrain::learner::IdxCompression;
using gridtrain::learner::read_idx;
using gridtrain::learner::write_idx;
using namespace gridtrain::learner::testing;

namespace {

// An IDX header for u8 data with these extents, as raw bytes.
std::string header(std::vector<std::uint32_t> dims, std::uint8_t type = 0x08) {
  std::string h = {'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (std::uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) h += static_cast<char>((d >> shift) & 0xff);
  return h;
}

// The error message read_idx gives for a file holding `bytes`; "" if it reads.
std::string read_error(const TempDir& dir, const std::string& bytes) {
  const auto path = dir.write("f.idx", bytes);
  auto r = read_idx(path.string());
  return r ? "" : r.error().message;
}

std::string gzip_bytes(const TempDir& dir, const IdxArray& a) {
  const auto path = dir.path() / "g.idx.gz";
  REQUIRE(write_idx(path.string(), a, IdxCompression::gzip));
  return read_bytes(path);
}

}  // namespace

TEST_CASE("an IDX file written plain or gzipped reads back the same extents and bytes") {
  TempDir dir;
  const IdxArray images = make_images(5, 3, 4);
  const IdxArray labels = make_labels(5);
  for (auto compression : {IdxCompression::plain, IdxCompression::gzip}) {
    CAPTURE(static_cast<int>(compression));
    for (const IdxArray* a : {&images, &labels}) {
      const std::string path = (dir.path() / "a.idx").string();
      REQUIRE(write_idx(path, *a, compression));
      auto r = read_idx(path);
      REQUIRE(r.ok());
      CHECK(r.value().dims == a->dims);
      CHECK(r.value().data == a->data);
    }
  }
  // Plain is byte for byte the format; gzip starts with the gzip magic.
  REQUIRE(write_idx((dir.path() / "p").string(), labels, IdxCompression::plain));
  CHECK(read_bytes(dir.path() / "p") == header({5}) + std::string("\0\1\2\3\4", 5));
  REQUIRE(write_idx((dir.path() / "z").string(), labels, IdxCompression::gzip));
  CHECK(read_bytes(dir.path() / "z").substr(0, 2) == "\x1f\x8b");
}

TEST_CASE("gzip data larger than the first read buffer, in two gzip members, reads whole") {
  // Two members make the trailer's size hint wrong (it covers the last member only), so memory must grow.
  TempDir dir;
  const IdxArray big = make_images(3, 1000, 1000);
  std::string plain = header(big.dims) + std::string(big.data.begin(), big.data.end());
  const auto path = dir.path() / "two.gz";
  gzFile gz = gzopen(path.c_str(), "wb1");
  REQUIRE(gz != nullptr);
  const std::size_t half = plain.size() / 2;
  REQUIRE(gzwrite(gz, plain.data(), static_cast<unsigned>(half)) == static_cast<int>(half));
  REQUIRE(gzclose(gz) == Z_OK);
  gz = gzopen(path.c_str(), "ab1");
  REQUIRE(gz != nullptr);
  REQUIRE(gzwrite(gz, plain.data() + half, static_cast<unsigned>(plain.size() - half)) ==
          static_cast<int>(plain.size() - half));
  REQUIRE(gzclose(gz) == Z_OK);

  auto r = read_idx(path.string());
  REQUIRE(r.ok());
  CHECK(r.value().dims == big.dims);
  CHECK(r.value().data == big.data);
}

TEST_CASE("a file that is not IDX is refused by its magic") {
  TempDir dir;
  CHECK(read_error(dir, "PK\x03\x04 more bytes") ==
        "bad magic 0x504b0304: expected an IDX file, whose first two bytes are zero (MNIST images: 0x00000803, "
        "labels: 0x00000801)");
}

TEST_CASE("element types other than unsigned byte are refused as unsupported") {
  TempDir dir;
  CHECK(read_error(dir, header({1}, 0x0d) + std::string(4, '\0')) ==
        "unsupported IDX element type 0x0d (float32): only 0x08 (unsigned byte) is supported");
  CHECK(read_error(dir, header({1}, 0x42) + "x").find("unsupported IDX element type 0x42 (not an IDX type)") == 0);
}

TEST_CASE("a magic declaring zero dimensions is refused") {
  TempDir dir;
  CHECK(read_error(dir, header({})) == "the magic declares 0 dimensions: expected at least 1");
}

TEST_CASE("a header cut short is refused, naming how much header was expected and found") {
  TempDir dir;
  CHECK(read_error(dir, std::string("\0\0", 2)) == "truncated header: expected a 4-byte magic, found 2 bytes");
  CHECK(read_error(dir, header({2, 3, 4}).substr(0, 10)) ==
        "truncated header: expected 16 bytes (the magic and 3 extents), found 10");
}

TEST_CASE("data shorter than the extents say is refused as truncated, plain or gzipped") {
  TempDir dir;
  const IdxArray a = make_images(2, 3, 4);
  const std::string full = header(a.dims) + std::string(a.data.begin(), a.data.end());
  CHECK(read_error(dir, full.substr(0, full.size() - 4)) ==
        "expected 24 bytes of data (2 x 3 x 4) after the 16-byte header, found 20 (file truncated?)");

  // A gzip stream of the short file: the same complaint.
  IdxArray short_data = a;
  short_data.dims = {2, 3, 4};
  short_data.data.resize(20);
  std::string gz = header(a.dims) + std::string(short_data.data.begin(), short_data.data.end());
  const auto plain_path = dir.write("short.idx", gz);
  const auto gz_path = dir.path() / "short.idx.gz";
  {
    gzFile out = gzopen(gz_path.c_str(), "wb");
    REQUIRE(out != nullptr);
    REQUIRE(gzwrite(out, gz.data(), static_cast<unsigned>(gz.size())) == static_cast<int>(gz.size()));
    REQUIRE(gzclose(out) == Z_OK);
  }
  auto r = read_idx(gz_path.string());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message ==
        "expected 24 bytes of data (2 x 3 x 4) after the 16-byte header, found 20 (file truncated?)");
}

TEST_CASE("a gzip file cut short is refused as truncated, wherever the cut falls") {
  TempDir dir;
  const std::string gz = gzip_bytes(dir, make_images(4, 5, 6));
  for (std::size_t n = 1; n < gz.size(); ++n) {
    CAPTURE(n);
    // Cuts inside the gzip header leave no data at all; later ones leave some, or all but the trailer.
    CHECK(read_error(dir, gz.substr(0, n)).find("truncated") != std::string::npos);
  }
  CHECK(read_error(dir, gz.substr(0, 5)) == "truncated gzip stream: it ends before any data (file truncated?)");
  CHECK(read_error(dir, gz.substr(0, gz.size() - 2)) ==
        "the gzip stream ends before its trailer (CRC and length) after all 136 bytes of data: file truncated?");
  CHECK(read_error(dir, gz.substr(0, 40)).find("(gzip stream cut short: file truncated?)") != std::string::npos);
}

TEST_CASE("bytes after the data are refused as trailing, plain or gzipped") {
  TempDir dir;
  const IdxArray a = make_images(2, 3, 4);
  const std::string full = header(a.dims) + std::string(a.data.begin(), a.data.end());
  const std::string expected =
      "expected 24 bytes of data (2 x 3 x 4) after the 16-byte header, found 27: 3 trailing bytes from offset 40";
  CHECK(read_error(dir, full + "xyz") == expected);

  const auto gz_path = dir.path() / "trailing.gz";
  gzFile out = gzopen(gz_path.c_str(), "wb");
  REQUIRE(out != nullptr);
  const std::string with_tail = full + "xyz";
  REQUIRE(gzwrite(out, with_tail.data(), static_cast<unsigned>(with_tail.size())) ==
          static_cast<int>(with_tail.size()));
  REQUIRE(gzclose(out) == Z_OK);
  auto r = read_idx(gz_path.string());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == expected);
}

TEST_CASE("a missing file, a directory and an empty file are refused, with the path and key in the error") {
  TempDir dir;
  auto missing = read_idx((dir.path() / "nope.idx").string(), "data.train_images");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().source == (dir.path() / "nope.idx").string());
  CHECK(missing.error().key == "data.train_images");
  CHECK(missing.error().message == "cannot open for reading: No such file or directory");
  CHECK(missing.error().to_string() ==
        (dir.path() / "nope.idx").string() + ": data.train_images: cannot open for reading: No such file or directory");

  auto directory = read_idx(dir.path().string());
  REQUIRE_FALSE(directory.ok());
  CHECK(directory.error().message == "is a directory, expected an IDX file");

  CHECK(read_error(dir, "").find("empty file: expected an IDX header") == 0);
  // An empty gzip stream holds no IDX header either.
  const auto empty_gz = dir.path() / "empty.gz";
  gzFile out = gzopen(empty_gz.c_str(), "wb");
  REQUIRE(out != nullptr);
  REQUIRE(gzclose(out) == Z_OK);
  auto r = read_idx(empty_gz.string());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("empty file: expected an IDX header") == 0);
}

TEST_CASE("a corrupt gzip stream is refused with zlib's reason") {
  TempDir dir;
  std::string gz = gzip_bytes(dir, make_images(4, 5, 6));
  // zlib writes a 10-byte gzip header; the deflate stream starts after it. BTYPE 11 does not exist.
  std::string bad_block = gz;
  bad_block[10] = '\x07';
  CHECK(read_error(dir, bad_block) == "corrupt gzip stream near uncompressed offset 0: invalid block type");
  // A wrong CRC in the trailer: all data arrives, then the check fails.
  std::string bad_crc = gz;
  bad_crc[gz.size() - 8] = static_cast<char>(bad_crc[gz.size() - 8] ^ 0x01);
  // (zlib may decompress a small stream whole on the first read, so the offset is where reading stood.)
  const std::string crc_error = read_error(dir, bad_crc);
  CHECK(crc_error.find("corrupt gzip stream near uncompressed offset ") == 0);
  CHECK(crc_error.ends_with(": incorrect data check"));
}

TEST_CASE("a header claiming far more data than the file holds is refused without allocating it") {
  TempDir dir;
  // 4 G x 4 G x 255 bytes would overflow; 65535 x 65535 x 255 (about 1 TB) would not, but the file is tiny.
  CHECK(read_error(dir, header({0xffffffff, 0xffffffff, 0xffffffff}) + "x").find("more bytes than memory can hold") !=
        std::string::npos);
  CHECK(read_error(dir, header({65535, 65535, 255}) + "x") ==
        "expected 1095183237375 bytes of data (65535 x 65535 x 255) after the 16-byte header, found 1 (file "
        "truncated?)");
  // Gzipped, the size is not known up front: memory grows only as data arrives.
  IdxArray liar{{65535, 65535, 255}, {}};
  const std::string body = header(liar.dims) + "tiny";
  const auto path = dir.path() / "liar.gz";
  gzFile out = gzopen(path.c_str(), "wb");
  REQUIRE(out != nullptr);
  REQUIRE(gzwrite(out, body.data(), static_cast<unsigned>(body.size())) == static_cast<int>(body.size()));
  REQUIRE(gzclose(out) == Z_OK);
  auto r = read_idx(path.string());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("found 4 (file truncated?)") != std::string::npos);
}

TEST_CASE("no single flipped byte, truncation or garbage file makes the reader crash or accept wrong data") {
  TempDir dir;
  const IdxArray a = make_images(3, 4, 5);
  const std::string plain = header(a.dims) + std::string(a.data.begin(), a.data.end());
  const std::string gz = gzip_bytes(dir, a);
  for (const std::string* original : {&plain, &gz}) {
    for (std::size_t i = 0; i < original->size(); ++i) {
      for (int bit : {0, 7}) {
        std::string flipped = *original;
        flipped[i] = static_cast<char>(flipped[i] ^ (1 << bit));
        const auto path = dir.write("flip.idx", flipped);
        auto r = read_idx(path.string());
        CAPTURE(i);
        if (!r.ok()) continue;
        // Plain data carries no checksum, so a flipped pixel reads; the extents never change.
        CHECK(r.value().dims == a.dims);
        if (original == &gz) CHECK(r.value().data == a.data);
      }
    }
  }
  // Deterministic garbage of many lengths.
  std::uint64_t state = 12345;
  for (int n = 0; n < 200; ++n) {
    std::string junk(static_cast<std::size_t>(n * 7 % 300), '\0');
    for (char& c : junk) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      c = static_cast<char>(state >> 56);
    }
    if (n % 3 == 0 && junk.size() >= 4) junk.replace(0, 4, header({static_cast<std::uint32_t>(n)}).substr(0, 4));
    if (n % 3 == 1 && junk.size() >= 2) junk.replace(0, 2, "\x1f\x8b");
    const auto path = dir.write("junk.idx", junk);
    auto r = read_idx(path.string());
    if (r.ok()) CHECK(r.value().data.size() + 4 + 4 * r.value().dims.size() == junk.size());
  }
}
