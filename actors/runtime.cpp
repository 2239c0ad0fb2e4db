#include "actors/runtime.hpp"

namespace gridtrain::actors {

Runtime::Runtime(const config::Config& config) : config_(config), system_(config_) {}

Result<NodeHandle> Runtime::start_node(NodeOptions options) { return actors::start_node(system_, std::move(options)); }

Result<GridView> Runtime::grid_view(const config::Endpoint& endpoint, std::chrono::milliseconds timeout) {
  return query_grid_view(system_, endpoint, timeout);
}

}  // namespace gridtrain::actors
