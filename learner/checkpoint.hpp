#pragma once
// Checkpoint: a node's training state on disk, so that `run --resume` continues where it stopped.
//
// The file is written atomically: to a temporary file in the same directory, fsynced, renamed over the target,
// then the directory fsynced. A crash, a full disk or any other failure during a write leaves the previous
// checkpoint as it was (a crash may leave a stray "<name>.tmp.XXXXXX" file beside it, which readers ignore).
// Like any mkstemp file, a checkpoint is created with mode 0600: it is the node's private state.
//
// Format (version 2), all integers little-endian, floats IEEE-754 binary32 little-endian:
//   offset  0  8 bytes  magic "GRIDCKPT"
//           8  u32      format version
//          12  u32      reserved, 0
//          16  u64      model signature (ParameterStore::signature)
//          24  u64      step
//          32  u64      epoch
//          40  u64      P: parameter floats
//          48  u64      O: optimizer-state floats
//          56  u64      R: RNG-state bytes
//          64  u64      Q: outer-state floats (allreduce.outer nesterov: the outer parameters, then the outer
//                       momentum, each P floats; 0 = none)
//          72  P floats, O floats, R bytes, Q floats
//          end u32      CRC-32 (zlib's) of every byte before it
// Version 1 (before the outer step) is read too: its header ends at 64, and it has no outer state.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/result.hpp"

namespace gridtrain::learner {

struct CheckpointData {
  // Every member has an initializer, so a designated initializer may name only some.
  std::uint64_t signature = 0;           // the model's; reading refuses a checkpoint of another model
  std::uint64_t step = 0;                // learner steps taken
  std::uint64_t epoch = 0;               // epochs completed
  std::vector<float> params{};           // the ParameterStore arena
  std::vector<float> optimizer_state{};  // e.g. momentum buffers, in the optimizer's own order
  std::vector<std::uint8_t> rng_state{};  // opaque; empty = none
  std::vector<float> outer_state{};       // empty, or the outer parameters then the outer momentum (2 x params)

  bool operator==(const CheckpointData&) const = default;
};

inline constexpr std::uint32_t checkpoint_version = 2;

// Writes `data` to `path` atomically (see above). Every failure (no such directory, permission, disk full, I/O
// error) comes back as an Error with `path` as its source, and leaves any previous file at `path` intact.
Status write_checkpoint(const std::string& path, const CheckpointData& data);

// Reads a checkpoint, verifying its magic, version, sizes, checksum and, last, that its signature is
// `expected_signature`. A corrupt, truncated, foreign or mismatched file is refused with an Error that says why.
Result<CheckpointData> read_checkpoint(const std::string& path, std::uint64_t expected_signature);

// One process's claim on a checkpoint path, for as long as it lives: an exclusive lock on "<path>.lock", which
// holds the claimant's process id. Two nodes with the same name and checkpoint.dir (a copied command line, the
// same --name twice) would overwrite each other's checkpoints, and --resume would give both the same one; the
// second is refused instead, naming the first. The lock file stays when the process ends (it holds no state; the
// lock goes with the process, however it ends), so that no claimant ever removes a file another one has locked.
class CheckpointClaim {
 public:
  // The claim, or why there is none: another process holds it (its pid in the error), or the lock file cannot be
  // created (no such directory, permission). Errors have `checkpoint_path` as their source.
  static Result<CheckpointClaim> claim(const std::string& checkpoint_path);
  CheckpointClaim(CheckpointClaim&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  CheckpointClaim& operator=(CheckpointClaim&& other) noexcept;
  ~CheckpointClaim();

 private:
  explicit CheckpointClaim(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace gridtrain::learner
