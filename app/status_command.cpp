#include <spdlog/spdlog.h>

#include <iostream>

#include "actors/runtime.hpp"
#include "actors/token_proof.hpp"
#include "app/commands.hpp"
#include "config/endpoint.hpp"
#include "telemetry/grid_view_text.hpp"

namespace gridtrain::app {

int status(const StatusArgs& args) {
  auto seeds = config::parse_endpoint_list(args.seed_address);
  if (!seeds) {
    Error error = seeds.error();
    error.source = "--seed";
    return fail(error);
  }
  auto token = actors::read_token(args.token_file);
  if (!token) {
    Error error = token.error();
    error.source = "--token-file";
    return fail(error);
  }
  spdlog::set_level(spdlog::level::warn);
  actors::Runtime runtime{config::Config{}};
  // The first seed that answers with the grid; every failure is reported if none does.
  std::string failures;
  std::optional<actors::GridView> view;
  for (const config::Endpoint& seed : seeds.value()) {
    auto asked = runtime.grid_view(seed, token.value());
    if (asked) {
      view = std::move(asked).value();
      break;
    }
    failures += (failures.empty() ? "" : "; ") + seed.to_string() + ": " + asked.error().to_string();
  }
  if (!view) return fail(kInternal, failures);
  std::cout << (args.json ? telemetry::grid_view_json(*view) + "\n" : telemetry::grid_view_table(*view));
  std::cout.flush();
  return kOk;
}

}  // namespace gridtrain::app
