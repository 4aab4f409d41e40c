// temp_report_json.cpp: TEMPORARY report.json (swap for reports' write_reports at merge).
#include "temp_report_json.h"

#include <cmath>

#include "ft/core/atomic_file.h"

namespace ft::diagnose {

using nlohmann::json;
using profiler::kNumWaitClasses;
using profiler::WaitClass;

namespace {
json num(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }
json classes(const std::array<double, kNumWaitClasses>& a) {
  json j = json::object();
  for (int i = 0; i < kNumWaitClasses; ++i)
    j[profiler::wait_class_name(static_cast<WaitClass>(i))] = a[i];
  return j;
}
}  // namespace

json diagnosis_to_json_temp(const profiler::Diagnosis& d) {
  json steps = json::array();
  for (const auto& s : d.steps) {
    steps.push_back({{"step", s.step},
                     {"start_ms", s.start_ms},
                     {"wall_ms", s.wall_ms},
                     {"breakdown", classes(s.ms)},
                     {"detail", s.detail},
                     {"loss", num(s.loss)},
                     {"lr", num(s.lr)},
                     {"grad_norm", num(s.grad_norm)},
                     {"mem_allocated", s.mem_allocated},
                     {"mem_reserved", s.mem_reserved},
                     {"tokens_per_s", s.tokens_per_s}});
  }
  json findings = json::array();
  for (const auto& f : d.findings) {
    findings.push_back({{"class", f.cls},
                        {"share", f.share},
                        {"severity", profiler::severity_name(f.severity)},
                        {"title", f.title},
                        {"explanation", f.explanation},
                        {"evidence",
                         {{"steps", f.evidence.steps},
                          {"share", f.evidence.share},
                          {"examples", f.evidence.examples},
                          {"detail", f.evidence.detail}}},
                        {"knobs", f.knobs}});
  }
  json timeline = json::array();
  for (const auto& [ms, bytes] : d.memory_timeline) timeline.push_back({ms, bytes});
  return {{"source", d.source},
          {"steps", steps},
          {"totals", classes(d.totals)},
          {"findings", findings},
          {"mfu", d.mfu},
          {"tokens_per_s", d.tokens_per_s},
          {"memory",
           {{"peak", d.memory.peak},
            {"reserved", d.memory.reserved},
            {"fragmentation", d.memory.fragmentation},
            {"alloc_retries", d.memory.alloc_retries},
            {"ooms", d.memory.ooms},
            {"page_faults", d.memory.page_faults}}},
          {"loss_health",
           {{"has_nan", d.loss_health.has_nan},
            {"diverged", d.loss_health.diverged},
            {"spikes", d.loss_health.spikes},
            {"oscillation", d.loss_health.oscillation},
            {"verdict", d.loss_health.verdict}}},
          {"memory_timeline", timeline},
          {"config", d.config},
          {"environment", d.environment}};
}

void write_report_json_temp(const profiler::Diagnosis& d, const std::filesystem::path& dir) {
  write_file_atomic(dir / "report.json", diagnosis_to_json_temp(d).dump(2) + "\n");
}

}  // namespace ft::diagnose
