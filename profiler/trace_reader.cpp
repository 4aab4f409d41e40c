// trace_reader.cpp: Chrome trace-event JSON back into ft's Trace, with clear format errors.
#include "ft/profiler/trace_reader.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"

namespace ft::profiler {
namespace {

using nlohmann::json;

class Reader {
 public:
  Reader(std::string_view origin) : origin_(origin) {}

  Trace read(std::string_view text) {
    json root;
    try {
      root = json::parse(text.begin(), text.end());
    } catch (const json::parse_error& e) {
      throw FormatError(
          fmt::format("{}: not valid JSON at byte {}: {}", origin_, e.byte, e.what()));
    }
    const json* events = nullptr;
    if (root.is_array()) {
      events = &root;
    } else if (root.is_object() && root.contains("traceEvents") && root["traceEvents"].is_array()) {
      events = &root["traceEvents"];
    } else {
      throw FormatError(
          fmt::format("{}: not a trace: expected an object with a 'traceEvents' array", origin_));
    }
    Trace t;
    t.source = "chrome";
    if (root.is_object() && root.contains("ft") && root["ft"].is_object()) {
      const json& ft = root["ft"];
      if (ft.value("format", "") != "ft-trace") {
        throw FormatError(fmt::format("{}: 'ft' header does not say format 'ft-trace'", origin_));
      }
      if (ft.value("version", 0) != 1) {
        throw FormatError(
            fmt::format("{}: unsupported ft trace version {}", origin_, ft.value("version", 0)));
      }
      t.source = ft.value("source", "ft");
      base_ns_ = ft.value("base_ns", int64_t{0});
      t.dropped_events = ft.value("dropped_events", uint64_t{0});
      if (ft.contains("metadata") && ft["metadata"].is_object()) {
        for (const auto& [k, v] : ft["metadata"].items()) {
          t.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
        }
      }
    }
    // Pass 1: metadata (which pids/tracks are devices, names); pass 2: events.
    for (size_t i = 0; i < events->size(); ++i) {
      const json& e = (*events)[i];
      if (!e.is_object()) throw error(i, "is not an object");
      if (!e.contains("ph") || !e["ph"].is_string()) throw error(i, "has no string 'ph'");
      if (e["ph"] != "M") continue;
      const std::string name = e.value("name", "");
      const json args = e.contains("args") && e["args"].is_object() ? e["args"] : json::object();
      const bool device = args.value("ft_device", false);
      const uint32_t pid = id_field(e, "pid", i);
      if (name == "process_name") {
        if (device) device_pids_[pid] = true;
        t.processes[pid] = args.value("name", "");
      } else if (name == "thread_name") {
        const Track track{pid, id_field(e, "tid", i), device};
        if (device) device_pids_[pid] = true;
        t.tracks[track] = args.value("name", "");
      }
    }
    for (size_t i = 0; i < events->size(); ++i) read_event(t, (*events)[i], i);
    return t;
  }

 private:
  FormatError error(size_t i, const std::string& what) const {
    return FormatError(fmt::format("{}: traceEvents[{}] {}", origin_, i, what));
  }

  uint32_t id_field(const json& e, const char* key, size_t i) {
    if (!e.contains(key)) return 0;
    const json& v = e[key];
    if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= UINT32_MAX) {
      return static_cast<uint32_t>(v.get<int64_t>());
    }
    if (v.is_string()) {  // Kineto writes some pids/tids as labels: give each a stable id
      auto [it, fresh] = labels_.emplace(v.get<std::string>(), 0u);
      if (fresh) it->second = 0x7F000000u + static_cast<uint32_t>(labels_.size());
      return it->second;
    }
    throw error(i, fmt::format("has an invalid '{}'", key));
  }

  int64_t time_field(const json& e, const char* key, size_t i, bool required) {
    if (!e.contains(key)) {
      if (required) throw error(i, fmt::format("('{}') has no '{}'", e.value("ph", ""), key));
      return 0;
    }
    const json& v = e[key];
    double us = 0;
    if (v.is_number()) {
      us = v.get<double>();
    } else if (v.is_string()) {  // some tools quote large timestamps
      try {
        us = std::stod(v.get<std::string>());
      } catch (...) {
        throw error(i, fmt::format("has a non-numeric '{}'", key));
      }
    } else {
      throw error(i, fmt::format("has a non-numeric '{}'", key));
    }
    if (!std::isfinite(us) || std::fabs(us) > 9e12)
      throw error(i, fmt::format("has an out-of-range '{}'", key));
    return std::llround(us * 1000.0);
  }

  static double number(const json& v) {
    if (v.is_number()) return v.get<double>();
    if (v.is_string()) {
      const std::string s = v.get<std::string>();
      if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
      if (s == "Infinity") return std::numeric_limits<double>::infinity();
      if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    }
    return 0.0;
  }

  static Category guess_category(const std::string& cat, const std::string& name, Phase phase) {
    if (phase == Phase::kCounter) return Category::kCounter;
    if (cat == "kernel") return Category::kCompute;
    if (cat == "gpu_memcpy") {
      if (name.find("HtoD") != std::string::npos) return Category::kH2D;
      if (name.find("DtoH") != std::string::npos) return Category::kD2H;
      return Category::kD2D;
    }
    if (cat == "gpu_memset") return Category::kMemset;
    if (cat == "cuda_runtime" || cat == "cuda_driver") return Category::kHost;
    if (cat == "cuda_sync") return Category::kSync;
    if (name.rfind("ProfilerStep#", 0) == 0) return Category::kStep;
    return Category::kOther;
  }

  void read_event(Trace& t, const json& e, size_t i) {
    const std::string ph = e["ph"].get<std::string>();
    Event ev;
    if (ph == "X") {
      ev.phase = Phase::kSpan;
    } else if (ph == "i" || ph == "I") {
      ev.phase = Phase::kInstant;
    } else if (ph == "C") {
      ev.phase = Phase::kCounter;
    } else if (ph == "s") {
      ev.phase = Phase::kFlowStart;
    } else if (ph == "f") {
      ev.phase = Phase::kFlowEnd;
    } else {
      return;  // metadata and phases ft does not model (B/E, async, samples)
    }
    if (e.contains("name") && !e["name"].is_string()) throw error(i, "has a non-string 'name'");
    const std::string name = e.value("name", "");
    const std::string cat =
        e.contains("cat") && e["cat"].is_string() ? e["cat"].get<std::string>() : "";
    const json args = e.contains("args") && e["args"].is_object() ? e["args"] : json::object();
    ev.track.pid = id_field(e, "pid", i);
    ev.track.tid = id_field(e, "tid", i);
    ev.track.device = device_pids_.count(ev.track.pid) > 0 ||
                      (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset");
    ev.ts_ns = time_field(e, "ts", i, true) + base_ns_;
    if (ev.phase == Phase::kSpan) {
      ev.dur_ns = time_field(e, "dur", i, true);
      if (ev.dur_ns < 0) throw error(i, "has a negative 'dur'");
    }
    ev.name = t.names.intern(name);
    if (ev.phase == Phase::kFlowStart || ev.phase == Phase::kFlowEnd) {
      if (!e.contains("id") || !e["id"].is_number_unsigned())
        throw error(i, "(flow) has no numeric 'id'");
      ev.id = e["id"].get<uint64_t>();
      ev.category = Category::kOther;
      if (e.contains("ft_step") && e["ft_step"].is_number_integer())
        ev.step = e["ft_step"].get<int64_t>();
      t.events.push_back(ev);
      return;
    }
    if (ev.phase == Phase::kCounter) {
      ev.category = Category::kCounter;
      if (args.contains(name)) {
        ev.value = number(args[name]);
      } else if (!args.empty()) {
        ev.value = number(args.begin().value());
      }
      if (e.contains("ft_step") && e["ft_step"].is_number_integer())
        ev.step = e["ft_step"].get<int64_t>();
      t.events.push_back(ev);
      return;
    }
    Category c;
    if (args.contains("ft_cat") && args["ft_cat"].is_string()) {
      if (!parse_category(args["ft_cat"].get<std::string>(), &c)) {
        throw error(i,
                    fmt::format("has an unknown ft_cat '{}'", args["ft_cat"].get<std::string>()));
      }
    } else {
      c = guess_category(cat, name, ev.phase);
    }
    ev.category = c;
    auto int_arg = [&](const char* key, int64_t dflt) {
      return args.contains(key) && args[key].is_number_integer() ? args[key].get<int64_t>() : dflt;
    };
    ev.step = int_arg("step", -1);
    ev.arg = int_arg("arg", -1);
    ev.bytes = static_cast<uint64_t>(std::max<int64_t>(int_arg("bytes", 0), 0));
    ev.flags = static_cast<uint8_t>(int_arg("flags", 0) & 0xFF);
    ev.id = static_cast<uint64_t>(std::max<int64_t>(int_arg("correlation", 0), 0));
    if (args.contains("value")) ev.value = number(args["value"]);
    t.events.push_back(ev);
  }

  std::string origin_;
  int64_t base_ns_ = 0;
  std::map<uint32_t, bool> device_pids_;
  std::map<std::string, uint32_t> labels_;
};

}  // namespace

Trace parse_trace_json(std::string_view text, std::string_view origin) {
  try {
    return Reader(origin).read(text);
  } catch (const nlohmann::json::exception& e) {
    // A number out of range (1e400) while parsing, or a field of an unexpected type read by
    // json::value(): malformed input, never a crash.
    throw FormatError(fmt::format("{}: not a valid trace: {}", origin, e.what()));
  }
}

Trace read_trace_json(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  return parse_trace_json(text, path.string());
}

}  // namespace ft::profiler
