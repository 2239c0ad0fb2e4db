// The data plane's receiving side: bytes as they would come from a line peer's connection, frame after frame,
// through the same steps as the service's reader (decode_frame_header, LineRunner::land, the payload where land()
// says, LineRunner::landed). The line: 3 peers (node ids 10, 11, 12), we are index 0, a model of 64 floats in chunks
// of at most 8. The first byte picks the sender (byte % 3: 11, 12, or a node not in the line) and the line's wire
// format (byte / 3 % 3: fp32, bf16, int8), whose compressed payloads the runner decodes.
#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <vector>

#include "allreduce/elastic_update.hpp"
#include "dataplane/frame.hpp"
#include "dataplane/line_runner.hpp"
#include "fuzz_target.hpp"

namespace {

using namespace gridtrain;
using namespace gridtrain::dataplane;

struct NoOutbox : Outbox {
  void send(std::uint64_t, const FrameHeader&, std::span<const std::byte>, SlotTag, std::uint32_t) override {}
  void retire(SlotTag) override {}
  bool kernel_reads_payload(std::uint64_t) const override { return true; }  // sends straight from the model
};

// What the service's reader checks before it writes where land() said: a violation is a bug in land().
void require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  constexpr std::size_t kModel = 64;
  std::vector<float> model(kModel, 1.0f);
  ModelAccess access;
  access.floats = kModel;
  access.fetch = [&](std::size_t offset, std::span<float> into) {
    std::copy_n(model.begin() + static_cast<std::ptrdiff_t>(offset), into.size(), into.begin());
  };
  access.update = [&](const allreduce::Round& round, std::size_t begin, std::size_t end, float alpha) {
    allreduce::elastic_update(std::span<float>(model).subspan(begin, end - begin), begin, round, alpha);
  };
  access.fold = [&](std::size_t offset, std::size_t length, const allreduce::FoldTarget& target, float alpha) {
    require(offset + length <= kModel);
    allreduce::fold_chunk(std::span<float>(model).subspan(offset, length), target, 0, alpha);
  };
  access.memory = model;
  NoOutbox outbox;
  DimensionCounters counters;
  LineRunner runner(0, 10, access, outbox, [](const RoundEvent&) {}, counters);
  LineSpec spec;
  spec.epoch = 1;
  spec.layout_version = 1;
  spec.dim = 0;
  spec.line = 0;
  spec.peers = {10, 11, 12};
  spec.self_index = 0;
  spec.round.reduce_threshold = 0.5;  // one peer and we reduce; its block and ours complete a round
  spec.round.complete_threshold = 0.5;
  spec.round.quorum = allreduce::QuorumMode::fraction;
  spec.round.max_chunk_floats = 8;
  spec.round.elastic_rate = 0.5;
  spec.round.wire = static_cast<allreduce::WireFormat>(data[0] / 3 % 3);
  spec.rounds_in_flight = 2;
  require(runner.start_line(spec));

  const std::uint64_t senders[] = {11, 12, 99};
  const std::uint64_t sender = senders[data[0] % 3];
  std::span<const std::byte> stream = gridtrain::fuzz::bytes(data + 1, size - 1);
  // GRIDTRAIN_FUZZ_VERBOSE: what each input did, to check that the corpus reaches rounds (not only drains).
  struct Report {
    const DimensionCounters& c;
    ~Report() {
      if (std::getenv("GRIDTRAIN_FUZZ_VERBOSE"))
        std::fprintf(stderr, "rounds done %llu, bytes received %llu, stale %llu, malformed %llu\n",
                     static_cast<unsigned long long>(c.rounds_done.load()),
                     static_cast<unsigned long long>(c.bytes_received.load()),
                     static_cast<unsigned long long>(c.stale_dropped.load()),
                     static_cast<unsigned long long>(c.malformed.load()));
    }
  } report{counters};
  while (stream.size() >= kFrameHeaderBytes) {
    auto header = decode_frame_header(stream.first<kFrameHeaderBytes>());
    if (!header) return 0;  // the link closes
    stream = stream.subspan(kFrameHeaderBytes);
    const FrameHeader& h = header.value();
    const Landing landing = runner.land(sender, h);
    if (landing.kind == Landing::Kind::wait || landing.kind == Landing::Kind::refuse) return 0;
    const std::size_t payload = std::min(h.payload_bytes(), stream.size());
    if (landing.kind == Landing::Kind::direct) {
      require(landing.into.size() == h.length);
      // fp32 straight into place; a compressed payload is staged whole, as the reader does
      if (h.wire == allreduce::WireFormat::fp32) std::memcpy(landing.into.data(), stream.data(), payload);
    }
    if (payload < h.payload_bytes()) return 0;  // the stream ended inside the payload
    const std::vector<std::byte> staged(stream.begin(), stream.begin() + static_cast<std::ptrdiff_t>(payload));
    stream = stream.subspan(payload);
    runner.landed(h, landing, h.wire == allreduce::WireFormat::fp32 ? std::span<const std::byte>() : staged);
    // Now and then the control plane's side: the LineMaster starts the round this frame named, or its deadline.
    if (!stream.empty() && (static_cast<unsigned>(stream[0]) & 0xF0) == 0xA0) {
      if (static_cast<unsigned>(stream[0]) & 1) runner.deadline(h.key);
      else runner.start_round(h.key);
      stream = stream.subspan(1);
    }
  }
  return 0;
}
