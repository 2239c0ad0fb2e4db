#pragma once
// What every actor test builds on, deterministic or in real time: a probe config and small stores.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <memory>
#include <vector>

#include "actors/node_handle.hpp"
#include "config/config.hpp"
#include "learner/parameter_store.hpp"

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

// A TCP socket bound to a port of 127.0.0.1 the system picked, not listening yet; the caller closes `fd`.
struct LoopbackSocket {
  int fd = -1;
  std::uint16_t port = 0;
};
LoopbackSocket bind_loopback();

// The token `path` holds, read as start_node reads cluster.token_file ("" : none).
std::string token_in(const std::string& path);

// A node's options: `config`, id `id` and `store`; the rest as NodeOptions has it (listening, no seeds: it
// bootstraps).
actors::NodeOptions node_options(const config::Config& config, std::uint64_t id,
                                 std::shared_ptr<learner::ParameterStore> store);

// Starts a node in `system` with `options` and requires that it is welcomed (it bootstraps when it has no seeds).
actors::NodeHandle start_welcomed(caf::actor_system& system, const actors::NodeOptions& options);

}  // namespace gridtrain::testing
