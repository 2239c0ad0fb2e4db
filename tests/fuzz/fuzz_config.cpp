// The YAML config reader: any text gives a Config or an error that says where; never a crash.
#include <string_view>

#include "config/config.hpp"
#include "fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = gridtrain::config::load_string(text, "fuzz.yaml");
  if (config) (void)gridtrain::config::to_yaml(config.value());
  return 0;
}
