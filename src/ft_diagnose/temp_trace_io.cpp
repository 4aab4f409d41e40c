// temp_trace_io.cpp: TEMPORARY trace.json writer/reader (swap for prof's
// write_trace_json/read_trace_json).
#include "temp_trace_io.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"

namespace ft::diagnose {

using nlohmann::json;
using profiler::Category;
using profiler::Phase;

void write_trace_json_temp(const profiler::Trace& trace, const std::filesystem::path& path) {
  json events = json::array();
  for (const auto& [track, name] : trace.tracks) {
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", track.pid},
                      {"tid", track.tid},
                      {"args", {{"name", name}}}});
  }
  for (const auto& [pid, name] : trace.processes) {
    events.push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", name}}}});
  }
  for (const profiler::Event& ev : trace.events) {
    json j = {{"name", trace.names.at(ev.name)},
              {"cat", profiler::category_name(ev.category)},
              {"ts", ev.ts_ns / 1000.0},
              {"pid", ev.track.pid},
              {"tid", ev.track.tid}};
    if (ev.step >= 0) j["ftStep"] = ev.step;
    if (ev.track.device) j["ftDevice"] = true;
    if (ev.phase == Phase::kSpan) {
      j["ph"] = "X";
      j["dur"] = ev.dur_ns / 1000.0;
      json args = json::object();
      if (ev.arg >= 0) args["arg"] = ev.arg;
      if (ev.bytes) args["bytes"] = ev.bytes;
      if (ev.flags) args["flags"] = ev.flags;
      if (!args.empty()) j["args"] = args;
    } else if (ev.phase == Phase::kCounter) {
      j["ph"] = "C";
      j["args"] = {{"value", std::isfinite(ev.value) ? json(ev.value) : json(nullptr)}};
    } else {
      j["ph"] = "i";
      j["s"] = "t";
    }
    events.push_back(std::move(j));
  }
  json meta = json::object();
  for (const auto& [k, v] : trace.metadata) meta[k] = v;
  const json doc = {{"traceEvents", std::move(events)},
                    {"displayTimeUnit", "ms"},
                    {"ftSource", trace.source},
                    {"ftDroppedEvents", trace.dropped_events},
                    {"ftMetadata", std::move(meta)}};
  write_file_atomic(path, doc.dump());
}

profiler::Trace read_trace_json_temp(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    throw FormatError(
        fmt::format("{}: not valid JSON at byte {}: {}", path.string(), e.byte, e.what()));
  }
  profiler::Trace t;
  const json* list = &doc;
  if (doc.is_object()) {
    if (!doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
      throw FormatError(fmt::format("{}: no \"traceEvents\" array", path.string()));
    }
    list = &doc["traceEvents"];
    t.source = doc.value("ftSource", std::string("trace.json"));
    t.dropped_events = doc.value("ftDroppedEvents", uint64_t{0});
    if (doc.contains("ftMetadata") && doc["ftMetadata"].is_object()) {
      for (const auto& [k, v] : doc["ftMetadata"].items()) {
        t.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
      }
    }
  } else if (!doc.is_array()) {
    throw FormatError(
        fmt::format("{}: expected an object with traceEvents or an array", path.string()));
  }
  size_t index = 0;
  for (const json& j : *list) {
    try {
      const std::string ph = j.at("ph").get<std::string>();
      profiler::Track track{j.value("pid", 0u), j.value("tid", 0u), j.value("ftDevice", false)};
      if (ph == "M") {
        const std::string what = j.at("name").get<std::string>();
        const std::string name = j.at("args").at("name").get<std::string>();
        if (what == "thread_name") t.tracks[track] = name;
        if (what == "process_name") t.processes[track.pid] = name;
        ++index;
        continue;
      }
      profiler::Event ev;
      ev.track = track;
      const double ts = j.at("ts").get<double>();
      if (!std::isfinite(ts)) throw FormatError("non-finite ts");
      ev.ts_ns = std::llround(ts * 1000.0);
      ev.step = j.value("ftStep", int64_t{-1});
      ev.name = t.names.intern(j.value("name", std::string()));
      Category c = Category::kOther;
      profiler::parse_category(j.value("cat", std::string("other")), &c);
      ev.category = c;
      if (ph == "X") {
        ev.phase = Phase::kSpan;
        const double dur = j.at("dur").get<double>();
        if (!std::isfinite(dur) || dur < 0) throw FormatError("negative or non-finite dur");
        ev.dur_ns = std::llround(dur * 1000.0);
        if (j.contains("args")) {
          const json& a = j["args"];
          ev.arg = a.value("arg", int64_t{-1});
          ev.bytes = a.value("bytes", uint64_t{0});
          ev.flags = a.value("flags", uint8_t{0});
        }
      } else if (ph == "C") {
        ev.phase = Phase::kCounter;
        ev.category = Category::kCounter;
        const json& v = j.at("args").at("value");
        ev.value = v.is_null() ? std::nan("") : v.get<double>();
      } else {
        ev.phase = Phase::kInstant;
      }
      t.events.push_back(ev);
    } catch (const json::exception& e) {
      throw FormatError(
          fmt::format("{}: trace event {} is malformed: {}", path.string(), index, e.what()));
    } catch (const FormatError& e) {
      throw FormatError(fmt::format("{}: trace event {}: {}", path.string(), index, e.what()));
    }
    ++index;
  }
  return t;
}

}  // namespace ft::diagnose
