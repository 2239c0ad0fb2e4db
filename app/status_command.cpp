#include <spdlog/spdlog.h>

#include <iostream>

#include "actors/runtime.hpp"
#include "app/commands.hpp"
#include "config/endpoint.hpp"
#include "telemetry/grid_view_text.hpp"

namespace gridtrain::app {

int status(const StatusArgs& args) {
  auto seed = config::parse_endpoint(args.seed_address);
  if (!seed) {
    Error error = seed.error();
    error.source = "--seed";
    return fail(error);
  }
  spdlog::set_level(spdlog::level::warn);
  actors::Runtime runtime{config::Config{}};
  auto view = runtime.grid_view(seed.value());
  if (!view) return fail(kInternal, view.error().to_string());
  std::cout << (args.json ? telemetry::grid_view_json(view.value()) + "\n" : telemetry::grid_view_table(view.value()));
  std::cout.flush();
  return kOk;
}

}  // namespace gridtrain::app
