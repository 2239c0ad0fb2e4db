#include "actors/runtime.hpp"

#include <caf/logger.hpp>

namespace gridtrain::actors {

Runtime::Runtime(const config::Config& config) : config_(config), system_(config_) {}

Result<NodeHandle> Runtime::start_node(NodeOptions options) {
  if (!options.data_plane) {
    auto opened = shared_data_plane(options.config, options.listen);
    if (!opened) return opened.error();
    options.data_plane = std::move(opened).value();
  }
  return actors::start_node(system_, std::move(options));
}

Result<std::shared_ptr<dataplane::Service>> Runtime::shared_data_plane(const config::Config& config, bool listen) {
  if (!data_plane_) {
    auto opened = actors::start_data_plane(config, listen);
    if (!opened) return opened.error();
    data_plane_ = std::move(opened).value();
  }
  return data_plane_;
}

Result<GridView> Runtime::grid_view(const config::HostPort& endpoint, const Credentials& credentials,
                                   std::chrono::milliseconds timeout) {
  return query_grid_view(system_, endpoint, credentials, timeout);
}

std::function<std::chrono::nanoseconds()> Runtime::averaging_cpu() const {
  if (!data_plane_) return {};
  return [data_plane = data_plane_, actors = config_.actor_threads()] {
    return data_plane->cpu_time() + actors->total();
  };
}

void Runtime::release_calling_thread() { caf::logger::set_current_actor_system(nullptr); }

}  // namespace gridtrain::actors
