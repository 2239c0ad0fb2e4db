#include "telemetry/event_log.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <mutex>

namespace gridtrain::telemetry {

namespace {

struct EventLog {
  std::mutex lock;
  config::LogFormat format = config::LogFormat::text;
};

EventLog& event_log() {
  static EventLog log;
  return log;
}

// The whole line at once: one fwrite under stdout's lock, then a flush (a reader sees each event as it happens).
void write_line(std::string line) {
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

// ISO 8601 in UTC with milliseconds: 2026-11-25T14:03:11.207Z.
std::string utc_time(std::chrono::system_clock::time_point t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char out[80];
  std::snprintf(out, sizeof out, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(ms));
  return out;
}

// spdlog's lines in the json format, through the same lock as the node's events.
class JsonSink : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& m) override {
    const auto level = spdlog::level::to_string_view(m.level);
    std::string line = json_log_line(utc_time(m.time), std::string_view(level.data(), level.size()), "log",
                                     std::string_view(m.payload.data(), m.payload.size()));
    std::lock_guard<std::mutex> hold(event_log().lock);
    write_line(std::move(line));
  }
  void flush_() override { std::fflush(stdout); }
};

// spdlog's lines in the text format, through the same lock as the node's events.
class TextSink : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& m) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(m, formatted);
    std::string line(formatted.data(), formatted.size());
    while (!line.empty() && line.back() == '\n') line.pop_back();
    std::lock_guard<std::mutex> hold(event_log().lock);
    write_line(std::move(line));
  }
  void flush_() override { std::fflush(stdout); }
};

}  // namespace

std::string json_log_line(std::string_view time, std::string_view level, std::string_view event, std::string_view msg,
                          const nlohmann::json& fields) {
  // Ordered: time, level, event and msg first, where a person reading the raw lines looks.
  nlohmann::ordered_json line = {{"time", time}, {"level", level}, {"event", event}, {"msg", msg}};
  for (const auto& [key, value] : fields.items()) line[key] = value;
  // A message that is not UTF-8 (a peer's bytes in an error) is written with U+FFFD, not refused.
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void configure_event_log(config::LogFormat format, config::LogLevel level) {
  static constexpr spdlog::level::level_enum levels[] = {spdlog::level::trace, spdlog::level::debug,
                                                         spdlog::level::info, spdlog::level::warn,
                                                         spdlog::level::err};
  event_log().format = format;
  std::shared_ptr<spdlog::sinks::sink> sink;
  if (format == config::LogFormat::json)
    sink = std::make_shared<JsonSink>();
  else
    sink = std::make_shared<TextSink>();
  auto logger = std::make_shared<spdlog::logger>("gridnode", std::move(sink));
  if (format == config::LogFormat::text) logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %l %v");
  logger->set_level(levels[static_cast<int>(level)]);
  spdlog::set_default_logger(std::move(logger));
}

void tell(std::string_view event, const std::string& text, const nlohmann::json& fields) {
  std::string line = event_log().format == config::LogFormat::json
                         ? json_log_line(utc_time(std::chrono::system_clock::now()), "info", event, text, fields)
                         : text;
  std::lock_guard<std::mutex> hold(event_log().lock);
  write_line(std::move(line));
}

}  // namespace gridtrain::telemetry
