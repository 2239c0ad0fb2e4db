#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "telemetry/event_log.hpp"

namespace gridtrain::telemetry {

TEST_CASE("a JSON log line is one line of one object, whatever its message holds") {
  const std::string msg = "a \"quoted\" peer said\nline two\\ and \x01, then bytes \xff\xfe that are no UTF-8";
  const std::string line = json_log_line("2026-11-25T14:03:11.207Z", "warning", "log", msg, {{"peer", "10.0.0.5"}});
  CHECK(line.find('\n') == std::string::npos);
  const auto object = nlohmann::json::parse(line);
  CHECK(object["time"] == "2026-11-25T14:03:11.207Z");
  CHECK(object["level"] == "warning");
  CHECK(object["event"] == "log");
  CHECK(object["peer"] == "10.0.0.5");
  const std::string back = object["msg"];
  CHECK(back.find("a \"quoted\" peer said\nline two\\ and \x01, then bytes ") == 0);
  CHECK(back.find("\xef\xbf\xbd") != std::string::npos);  // U+FFFD for each byte that is no UTF-8
  // time, level, event and msg come first, in that order.
  CHECK(line.rfind("{\"time\":", 0) == 0);
  CHECK(line.find("\"level\"") < line.find("\"event\""));
  CHECK(line.find("\"event\"") < line.find("\"msg\""));
}

}  // namespace gridtrain::telemetry
