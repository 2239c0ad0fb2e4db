#include <spdlog/spdlog.h>

#include <algorithm>
#include <iostream>

#include "actors/runtime.hpp"
#include "actors/credentials.hpp"
#include "app/commands.hpp"
#include "config/config.hpp"
#include "config/host_port.hpp"
#include "telemetry/grid_view_text.hpp"

namespace gridtrain::app {

int status(const StatusArgs& args) {
  auto seeds = config::parse_host_port_list(args.seed_address);
  if (!seeds) {
    Error error = seeds.error();
    error.source = "--seed";
    return fail(error);
  }
  config::ClusterConfig cluster;
  if (!args.config_file.empty()) {
    auto loaded = config::load_file(args.config_file, {});
    if (!loaded) return fail(loaded.error());
    cluster = loaded.value().cluster;
  }
  if (!args.token_file.empty()) cluster.token_file = args.token_file;
  const int tls_given = !args.tls_certificate.empty() + !args.tls_key.empty() + !args.tls_ca.empty();
  if (tls_given != 0 && tls_given != 3)
    return fail(Error{.source = "--tls-certificate",
                      .message = "expected --tls-certificate, --tls-key and --tls-ca together, or none of them"});
  if (tls_given == 3) {
    cluster.tls_certificate = args.tls_certificate;
    cluster.tls_key = args.tls_key;
    cluster.tls_ca = args.tls_ca;
  }
  auto credentials = actors::load_credentials(cluster);
  if (!credentials) {
    // The loader names config keys; where they came from options, the error names the option.
    Error error = credentials.error();
    const bool from_option = error.key == "cluster.token_file" ? !args.token_file.empty() : tls_given == 3;
    if (!from_option) return fail(error);
    const std::string option = "--" + error.key.substr(error.key.find('.') + 1);
    std::string flag = option;
    std::replace(flag.begin(), flag.end(), '_', '-');
    error.message = error.source + ": " + error.message;
    error.source = flag;
    error.key.clear();
    return fail(error);
  }
  spdlog::set_level(spdlog::level::warn);
  actors::Runtime runtime{config::Config{}};
  // The first seed that answers with the grid; every failure is reported if none does.
  std::string failures;
  std::optional<actors::GridView> view;
  for (const config::HostPort& seed : seeds.value()) {
    auto asked = runtime.grid_view(seed, credentials.value());
    if (asked) {
      view = std::move(asked).value();
      break;
    }
    // Each failure names its seed once: an error that names its source already names the seed.
    const Error& why = asked.error();
    failures += (failures.empty() ? "" : "; ") + (why.source.empty() ? seed.to_string() + ": " : "") + why.to_string();
  }
  if (!view) return fail(kInternal, failures);
  std::cout << (args.json ? telemetry::grid_view_json(*view) + "\n" : telemetry::grid_view_table(*view));
  std::cout.flush();
  return kOk;
}

}  // namespace gridtrain::app
