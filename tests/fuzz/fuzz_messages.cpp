// The control plane's message payloads as CAF 0.17 deserializes them (binary_deserializer, our inspect functions),
// once a peer is past the gate: the first byte picks the type, the rest is its serialized bytes. Actor handles in
// them resolve against a real actor system (one with no connections: a remote handle is an error, not a proxy).
#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>

#include <memory>
#include <vector>

#include "actors/messages.hpp"
#include "fuzz_target.hpp"

namespace {

using namespace gridtrain::actors;

// Made once and never destroyed: destroyed among the statics at exit, CAF 0.17's actor system outlives state of
// its own library and crashes.
caf::actor_system& system_for_handles() {
  static auto* config = new caf::actor_system_config;
  static auto* system = new caf::actor_system{*config};
  return *system;
}

template <class T>
void load(caf::actor_system& system, const std::vector<char>& buffer) {
  caf::binary_deserializer source{system, buffer};
  T value;
  (void)source(value);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  auto& system = system_for_handles();
  const std::vector<char> buffer(reinterpret_cast<const char*>(data) + 1, reinterpret_cast<const char*>(data) + size);
  switch (data[0] % 15) {
    case 0: load<FloatPayload>(system, buffer); break;
    case 1: load<Join>(system, buffer); break;
    case 2: load<Welcome>(system, buffer); break;
    case 3: load<Reject>(system, buffer); break;
    case 4: load<Leave>(system, buffer); break;
    case 5: load<Removed>(system, buffer); break;
    case 6: load<StartLine>(system, buffer); break;
    case 7: load<StopLine>(system, buffer); break;
    case 8: load<StartRound>(system, buffer); break;
    case 9: load<RoundDone>(system, buffer); break;
    case 10: load<GridState>(system, buffer); break;
    case 11: load<NodeReport>(system, buffer); break;
    case 12: load<GridView>(system, buffer); break;
    case 13: load<LayoutState>(system, buffer); break;
    default: load<JoinChallenge>(system, buffer); break;
  }
  return 0;
}
