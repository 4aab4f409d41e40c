// critical_path_rows.cpp: Kineto JSON -> the rows HTA's critical-path analysis works on.
#include "critical_path_rows.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "ft/core/error.h"

namespace ft::profiler::kineto {

namespace {

using nlohmann::json;

// A pid/tid as an integer; names (e.g. "Spans") are hashed to a stable negative id.
int64_t id_of(const json& v) {
  if (v.is_number()) return v.get<int64_t>();
  if (v.is_string()) {
    return -static_cast<int64_t>(std::hash<std::string>{}(v.get<std::string>()) >> 2) - 2;
  }
  return 0;
}

int64_t arg_int(const json& args, const char* key) {
  if (!args.is_object()) return -1;
  const auto it = args.find(key);
  if (it == args.end() || !it->is_number()) return -1;
  return it->get<int64_t>();
}

CpRow make_row(const json& e, int64_t ev_idx) {
  CpRow r;
  r.ev_idx = ev_idx;
  r.name = e.value("name", std::string());
  r.cat = e.at("cat").get<std::string>();
  r.pid = id_of(e.value("pid", json()));
  r.tid = id_of(e.value("tid", json()));
  const double ts = e.at("ts").get<double>();
  const double dur = e.at("dur").get<double>();
  r.ts = static_cast<int64_t>(std::ceil(ts));
  r.dur = static_cast<int64_t>(std::floor(ts + dur)) - r.ts;
  const json& args = e.contains("args") ? e.at("args") : json();
  r.stream = arg_int(args, "stream");
  r.corr = arg_int(args, "correlation");
  r.wait_stream = arg_int(args, "wait_on_stream");
  r.wait_corr = arg_int(args, "wait_on_cuda_event_record_corr_id");
  return r;
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

CpTrace load_cp_trace(const std::string& text, bool align_and_cut) {
  const json doc = json::parse(text);
  const json* events = &doc;
  if (doc.is_object()) {
    if (!doc.contains("traceEvents")) throw FormatError("trace has no traceEvents");
    events = &doc.at("traceEvents");
  }
  CpTrace t;
  if (doc.is_object() && doc.contains("distributedInfo") && doc["distributedInfo"].is_object()) {
    const json& info = doc["distributedInfo"];
    if (info.contains("rank") && info["rank"].is_number_integer()) t.rank = info["rank"];
  }
  std::vector<CpRow> rows;
  int64_t ev_idx = 0;
  for (const json& e : *events) {
    const int64_t idx = ev_idx++;
    if (!e.is_object() || !e.contains("dur") || !e.contains("cat") || !e.contains("ts")) continue;
    if (!e.at("cat").is_string() || e.at("cat") == "Trace" || !e.at("dur").is_number()) continue;
    rows.push_back(make_row(e, idx));
    if (rows.back().cat == "cuda_sync") t.has_cuda_sync = true;
  }
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
