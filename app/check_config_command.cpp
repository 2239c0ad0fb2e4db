#include <iostream>

#include "actors/credentials.hpp"
#include "app/commands.hpp"
#include "config/config.hpp"

namespace gridtrain::app {

int check_config(const CheckConfigArgs& args) {
  if (args.schema) {
    std::cout << config::describe_schema();
    return kOk;
  }
  if (args.file.empty()) return fail(kBadInput, "check-config: a config FILE is required (or --schema)");
  auto loaded = config::load_file(args.file, args.overrides);
  if (!loaded) return fail(loaded.error());
  // The token and TLS files as a node loads them: a key that does not match its certificate, or a certificate the
  // CA did not sign, is found here rather than when the node starts.
  if (auto credentials = actors::load_credentials(loaded.value().cluster); !credentials)
    return fail(credentials.error());
  if (args.print)
    std::cout << config::to_yaml(loaded.value());
  else
    std::cout << args.file << ": ok\n";
  return kOk;
}

}  // namespace gridtrain::app
