// diagnosis_critical_path.cpp: HTA's critical path of the diagnosed step, for report.json.
#include <fmt/format.h>

#include <algorithm>
#include <exception>

#include "ft/profiler/critical_path.h"
#include "ft/profiler/findings.h"
#include "ft/profiler/load_trace.h"

namespace ft::profiler {

void add_critical_path(const std::filesystem::path& path, int rank, Diagnosis* d) {
  CriticalPathSummary& cp = d->critical_path;
  cp = CriticalPathSummary{};
  cp.computed = true;
  cp.annotation = "ProfilerStep";
  cp.rank = rank;
  if (d->steps_rule.rfind("ProfilerStep", 0) != 0) {
    cp.error = "not computed: the trace has no ProfilerStep spans (" + d->steps_rule + ")";
    return;
  }
  // The first steady step: the first after the warm-up that is not a stub (the steps' own
  // numbers are ProfilerStep#N; the instance is its position among them).
  RunInfo run;
  run.warmup_excluded = 1;
  const auto steady = steady_steps(d->steps, run);
  if (steady.empty()) {
    cp.error = "not computed: no steady step";
    return;
  }
  cp.instance = steady.front() - d->steps.data();
  cp.step = steady.front()->step;
  CriticalPathOptions o;
  o.rank = cp.rank;
  o.annotation = cp.annotation;
  o.instance_first = o.instance_last = cp.instance;
  try {
    const CriticalPathResult r = critical_path(path.string(), o);
    cp.success = r.success;
    cp.error = r.error;
    if (!r.success) return;
    cp.total_us = r.total_us;
    auto read = [](const nlohmann::json& j, const char* key, std::map<std::string, int64_t>* out) {
      if (!j.contains(key) || !j.at(key).is_object()) return;
      for (const auto& [k, v] : j.at(key).items()) {
        if (v.is_object() && v.contains("duration_sum") && v.at("duration_sum").is_number())
          (*out)[k] = v.at("duration_sum").get<int64_t>();
      }
    };
    read(r.json, "breakdown_by_type", &cp.by_type_us);
    read(r.json, "breakdown_by_bound_by", &cp.by_bound_us);
  } catch (const std::exception& e) {
    cp.success = false;
    cp.error = fmt::format("critical path failed: {}", e.what());
  }
}

}  // namespace ft::profiler
