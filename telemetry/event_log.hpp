#pragma once
// What a running node tells its operator, one line per event, on stdout: the node's own events ("listening on",
// "joined the cluster", an epoch's progress, ...) and the log lines of every library (spdlog). Two formats
// (metrics.log_format, `gridnode run --log-format`):
//   text  people: an event is its sentence ("epoch 3 samples 15000 ..."), a log line "2026-11-25 14:03:11.207
//         info <message>";
//   json  machines: one JSON object per line, {"time", "level", "event" (the node's own events), "msg", and an
//         event's figures as fields of their own}; a log line has "event": "log".
// Every line is written whole, under one lock, with one write: lines of several threads never interleave.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "config/enums.hpp"

namespace gridtrain::telemetry {

// Sets the format and the least severe level logged, for the process. Call once, before the node starts.
void configure_event_log(config::LogFormat format, config::LogLevel level);

// One event of the node: `text` in the text format; in JSON, {"time", "level": "info", "event": name, "msg": text}
// with `fields` added.
void tell(std::string_view event, const std::string& text, const nlohmann::json& fields = nlohmann::json::object());

// The JSON line of a log message (the json format's spdlog lines): exposed for tests.
std::string json_log_line(std::string_view time, std::string_view level, std::string_view event, std::string_view msg,
                          const nlohmann::json& fields = nlohmann::json::object());

}  // namespace gridtrain::telemetry
