// critical_path_rows.cpp: Kineto JSON -> the rows HTA's critical-path analysis works on.
#include "critical_path_rows.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "ft/core/error.h"

namespace ft::profiler::kineto {

namespace {

namespace od = simdjson::ondemand;

// A JSON number as an integer the way nlohmann's get<int64_t> gives it (a float truncated).
int64_t int_of(od::value v) {
  od::number n = v.get_number();
  switch (n.get_number_type()) {
    case od::number_type::signed_integer:
      return n.get_int64();
    case od::number_type::unsigned_integer:
      return static_cast<int64_t>(n.get_uint64());
    default:
      return static_cast<int64_t>(n.get_double());
  }
}

// A pid/tid as an integer; names (e.g. "Spans") are hashed to a stable negative id.
int64_t id_of(od::value v) {
  switch (v.type()) {
    case od::json_type::number:
      return int_of(v);
    case od::json_type::string: {
      const std::string_view s = v.get_string();
      return -static_cast<int64_t>(std::hash<std::string_view>{}(s) >> 2) - 2;
    }
    default:
      return 0;
  }
}

int64_t arg_int(od::value v) { return v.type() == od::json_type::number ? int_of(v) : -1; }

// One traceEvents element as a row, or false when HTA's loader drops it (no ts, dur or cat, a
// cat that is not a string or is "Trace", a dur that is not a number).
bool read_row(od::value ev, int64_t ev_idx, CpRow* out) {
  if (ev.type() != od::json_type::object) return false;
  CpRow r;
  r.ev_idx = ev_idx;
  bool has_ts = false, has_dur = false, has_cat = false, cat_string = false, dur_number = false;
  bool ts_number = false;
  double ts = 0, dur = 0;
  for (auto field : ev.get_object()) {
    const std::string_view key = field.unescaped_key();
    od::value v = field.value();
    if (key == "name") {
      r.name = v.type() == od::json_type::string ? std::string(std::string_view(v.get_string()))
                                                 : std::string();
    } else if (key == "cat") {
      has_cat = true;
      cat_string = v.type() == od::json_type::string;
      if (cat_string) r.cat = std::string(std::string_view(v.get_string()));
    } else if (key == "pid") {
      r.pid = id_of(v);
    } else if (key == "tid") {
      r.tid = id_of(v);
    } else if (key == "ts") {
      has_ts = true;
      ts_number = v.type() == od::json_type::number;
      if (ts_number) ts = v.get_double();
    } else if (key == "dur") {
      has_dur = true;
      dur_number = v.type() == od::json_type::number;
      if (dur_number) dur = v.get_double();
    } else if (key == "args" && v.type() == od::json_type::object) {
      // A range-profiler kernel's numeric args are its counters (its category comes first in
      // Kineto's output; one written after args would lose them).
      const bool counters = r.cat == "cuda_profiler_range";
      for (auto a : v.get_object()) {
        const std::string_view k = a.unescaped_key();
        od::value av = a.value();
        if (k == "stream") {
          r.stream = arg_int(av);
        } else if (k == "correlation") {
          r.corr = arg_int(av);
        } else if (k == "wait_on_stream") {
          r.wait_stream = arg_int(av);
        } else if (k == "wait_on_cuda_event_record_corr_id") {
          r.wait_corr = arg_int(av);
        } else if (counters && av.type() == od::json_type::number) {
          r.counters.emplace_back(std::string(k), av.get_double());
        }
      }
    }
  }
  if (!has_ts || !has_dur || !has_cat || !cat_string || r.cat == "Trace" || !dur_number)
    return false;
  if (!ts_number) throw FormatError(fmt::format("traceEvents[{}]: ts is not a number", ev_idx));
  r.ts = static_cast<int64_t>(std::ceil(ts));
  r.dur = static_cast<int64_t>(std::floor(ts + dur)) - r.ts;
  *out = std::move(r);
  return true;
}

// HTA's last-step drop: with two or more ProfilerSteps, CPU rows from the last step's start on
// go, and so do GPU rows whose correlation no kept CPU row carries. CPU rows come first.
std::vector<CpRow> drop_last_step(std::vector<CpRow> rows) {
  int64_t last_step = INT64_MIN;
  size_t steps = 0;
  for (const CpRow& r : rows) {
    if (r.name.rfind("ProfilerStep#", 0) == 0) {
      ++steps;
      last_step = std::max(last_step, r.ts);
    }
  }
  if (steps < 2) return rows;
  std::vector<CpRow> kept;
  std::unordered_set<int64_t> kept_corr;
  for (CpRow& r : rows) {
    if (r.gpu() || r.ts >= last_step) continue;
    if (r.corr != -1) kept_corr.insert(r.corr);
    kept.push_back(std::move(r));
  }
  for (CpRow& r : rows) {
    if (r.gpu() && r.corr != -1 && kept_corr.count(r.corr)) kept.push_back(std::move(r));
  }
  return kept;
}

// HTA's index_correlation: GPU-side rows (a stream and a correlation, or a device-level sync)
// and CPU-side rows with the same correlation point at each other.
void link_partners(std::vector<CpRow>* rows) {
  std::unordered_map<int64_t, int64_t> cpu, gpu;
  auto gpu_side = [](const CpRow& r) {
    return (r.stream >= 0 && r.corr >= 0) || r.name == "Event Sync" || r.name == "Context Sync";
  };
  for (size_t i = 0; i < rows->size(); ++i) {
    CpRow& r = (*rows)[i];
    r.linked_corr = r.corr >= 0;
    if (r.corr == -1) continue;
    (gpu_side(r) ? gpu : cpu)[r.corr] = static_cast<int64_t>(i);
  }
  for (size_t i = 0; i < rows->size(); ++i) {
    CpRow& r = (*rows)[i];
    if (r.corr == -1) continue;
    const auto& other = gpu_side(r) ? cpu : gpu;
    const auto it = other.find(r.corr);
    if (it != other.end()) r.partner = it->second;
  }
}

}  // namespace

CpTrace load_cp_trace(std::string text, bool align_and_cut) {
  // simdjson's On-Demand parser reads the text in place (it needs SIMDJSON_PADDING spare bytes):
  // no DOM of the whole trace is built.
  text.reserve(text.size() + simdjson::SIMDJSON_PADDING);
  CpTrace t;
  std::vector<CpRow> rows;
  bool has_events = false;
  try {
    od::parser parser;
    od::document doc =
        parser.iterate(simdjson::padded_string_view(text.data(), text.size(), text.capacity()));
    int64_t ev_idx = 0;
    auto read_events = [&](od::array events) {
      has_events = true;
      for (auto e : events) {
        CpRow r;
        if (read_row(e.value(), ev_idx++, &r)) {
          if (r.cat == "cuda_sync") t.has_cuda_sync = true;
          rows.push_back(std::move(r));
        }
      }
    };
    if (doc.type() == od::json_type::array) {
      read_events(doc.get_array());
    } else {
      for (auto field : doc.get_object()) {
        const std::string_view key = field.unescaped_key();
        od::value v = field.value();
        if (key == "traceEvents" && v.type() == od::json_type::array) {
          rows.clear();  // a repeated key: the last one counts, as in a DOM
          ev_idx = 0;
          read_events(v.get_array());
        } else if (key == "distributedInfo" && v.type() == od::json_type::object) {
          for (auto f : v.get_object()) {
            if (f.unescaped_key() == std::string_view("rank")) {
              od::value rank = f.value();
              if (rank.type() == od::json_type::number &&
                  rank.get_number_type() != od::number_type::floating_point_number)
                t.rank = int_of(rank);
            }
          }
        }
      }
    }
  } catch (const simdjson::simdjson_error& e) {
    throw FormatError(std::string("invalid JSON: ") + e.what());
  }
  if (!has_events) throw FormatError("trace has no traceEvents");
  if (align_and_cut) {
    int64_t min_ts = INT64_MAX;
    for (const CpRow& r : rows) min_ts = std::min(min_ts, r.ts);
    for (CpRow& r : rows) r.ts -= min_ts;
    rows = drop_last_step(std::move(rows));
  }
  t.rows = std::move(rows);
  link_partners(&t.rows);
  return t;
}

}  // namespace ft::profiler::kineto
