#pragma once
// What every actor test builds on, deterministic or in real time: a probe config and small stores.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <memory>
#include <vector>

#include "actors/node_handle.hpp"
#include "base/result.hpp"
#include "config/config.hpp"
#include "learner/parameter_store.hpp"
#include "tests/loopback_socket.hpp"

namespace gridtrain::testing {

// A probe config: `dims` dimensions (0: auto), θr = θc = θa = 1, elastic rate `alpha`, small chunks so that a
// block spans several messages.
config::Config cluster_config(int dims, double alpha, int max_chunk_floats = 16);

// A store of two tensors ("w" then "b", so the update crosses a tensor boundary) holding `floats` floats:
// value j is base + (j % 7).
std::shared_ptr<learner::ParameterStore> make_store(std::size_t floats, float base);

// Every float of the store, read under its locks.
std::vector<float> read(const learner::ParameterStore& store);

// A token file in a fresh temporary directory, removed with the object.
struct TokenFile {
  explicit TokenFile(const std::string& token);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  std::string path() const { return (dir / "token").string(); }
  std::filesystem::path dir;
};

// The token `path` holds, read as start_node reads cluster.token_file ("" : none).
std::string token_in(const std::string& path);

// A node's options: `config`, id `id` and `store`; the rest as NodeOptions has it (listening, no seeds: it
// bootstraps).
actors::NodeOptions node_options(const config::Config& config, std::uint64_t id,
                                 std::shared_ptr<learner::ParameterStore> store);

// `like`'s options for another node: id `id` and `store`, joining through the nodes at these ports of 127.0.0.1, in
// order.
actors::NodeOptions joiner_options(const actors::NodeOptions& like, std::uint64_t id,
                                   std::shared_ptr<learner::ParameterStore> store,
                                   const std::vector<std::uint16_t>& seed_ports);

// Starts a node in `system` with `options` and requires that it is welcomed (it bootstraps when it has no seeds).
actors::NodeHandle start_welcomed(caf::actor_system& system, const actors::NodeOptions& options);

// Ends the nodes it holds when it goes out of scope, however the test leaves: each one still running is killed,
// then waited for. Declare it after the test's actor systems, so that it goes first. Without it, a REQUIRE that
// failed mid-test left its nodes running, ~actor_system waited for them for good, and ctest reported a timeout
// minutes later instead of the failure doctest had printed. Nodes the test ended itself are left as they are.
class EndNodesAtExit {
 public:
  EndNodesAtExit() = default;
  EndNodesAtExit(const EndNodesAtExit&) = delete;
  EndNodesAtExit& operator=(const EndNodesAtExit&) = delete;
  ~EndNodesAtExit();

  // Holds `node` (a copy refers to the same node) and returns it.
  const actors::NodeHandle& hold(const actors::NodeHandle& node);
  // Holds the node, if it started.
  const Result<actors::NodeHandle>& hold(const Result<actors::NodeHandle>& node);

 private:
  std::vector<actors::NodeHandle> nodes_;
};

}  // namespace gridtrain::testing
