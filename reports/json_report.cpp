// json_report.cpp: the report.json writer (profiler/diagnosis_json.cpp reads it back).
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "format.h"
#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/core/parallel.h"
#include "ft/profiler/diagnosis_json.h"
#include "ft/reports/report.h"

namespace ft::reports {
namespace {

using Json = nlohmann::ordered_json;
using profiler::Diagnosis;
using profiler::kNumWaitClasses;
using profiler::WaitClass;

// Fixed-precision rounding so the text is deterministic; NaN/inf become null.
Json round_to(double x, double scale) {
  if (!std::isfinite(x)) return nullptr;
  double r = std::round(x * scale) / scale;
  if (r == 0) r = 0;  // no -0
  return r;
}
Json ms(double x) { return round_to(x, 1e3); }
Json share(double x) { return round_to(x, 1e6); }
Json whole(double x) {
  if (!std::isfinite(x)) return nullptr;
  return static_cast<int64_t>(std::llround(x));
}
Json sig6(double x) {
  if (!std::isfinite(x)) return nullptr;
  if (x == 0) return 0.0;
  // strtod, not stod: a subnormal result sets ERANGE, which stod turns into an exception.
  return std::strtod(fmt::format("{:.6g}", x).c_str(), nullptr);
}

Json classes(const std::array<double, kNumWaitClasses>& v, Json (*conv)(double)) {
  Json o = Json::object();
  for (int c = 0; c < kNumWaitClasses; ++c) o[profiler::wait_class_name(WaitClass(c))] = conv(v[c]);
  return o;
}

// Multi-rank runs: the cross-rank summary and one row per rank (absent for one rank).
void add_ranks(Json& j, const Diagnosis& d) {
  if (d.ranks.empty()) return;
  const auto& p = d.parallel;
  j["parallel"] =
      Json{{"ranks", p.ranks},
           {"dp", p.dp},
           {"tp", p.tp},
           {"pp", p.pp},
           {"micro_batches", p.micro_batches},
           {"collectives", p.collectives},
           {"transfer_ms", ms(p.transfer_ms)},
           {"sync_ms", ms(p.sync_ms)},
           {"straggler", p.straggler},
           {"straggler_late_ms", ms(p.straggler_late_ms)},
           {"straggler_late_frac", share(p.straggler_late_frac)},
           {"bubble", p.bubble < 0 ? Json(nullptr) : share(p.bubble)},
           {"bubble_theory", p.bubble_theory < 0 ? Json(nullptr) : share(p.bubble_theory)},
           {"clock", p.clock}};
  Json rows = Json::array();
  for (const auto& r : d.ranks) {
    rows.push_back(Json{{"rank", r.rank},
                        {"dp_rank", r.dp_rank},
                        {"tp_rank", r.tp_rank},
                        {"pp_stage", r.pp_stage},
                        {"host", r.host},
                        {"steps", r.steps},
                        {"step_ms", ms(r.step_ms)},
                        {"totals", classes(r.totals, share)},
                        {"exposed_comm_ms", ms(r.exposed_comm_ms)},
                        {"exposed_wait_ms", ms(r.exposed_wait_ms)},
                        {"collective_ms", ms(r.collective_ms)},
                        {"collective_sync_ms", ms(r.collective_sync_ms)},
                        {"collectives", r.collectives},
                        {"late", r.late},
                        {"late_ms", ms(r.late_ms)},
                        {"bubble", r.bubble < 0 ? Json(nullptr) : share(r.bubble)},
                        {"bubble_ms", ms(r.bubble_ms)},
                        {"clock_offset_ms", ms(r.clock_offset_ms)}});
  }
  j["ranks"] = std::move(rows);
}

Json build_json(const Diagnosis& d) {
  Json j;
  j["format"] = profiler::kDiagnosisJsonFormat;
  j["version"] = kReportJsonVersion;
  j["source"] = d.source;
  if (!d.steps_rule.empty()) j["steps_rule"] = d.steps_rule;
  if (!d.warnings.empty()) j["warnings"] = d.warnings;
  j["mfu"] = sig6(d.mfu);
  j["tokens_per_s"] = sig6(d.tokens_per_s);
  j["totals"] = classes(d.totals, share);
  Json findings = Json::array();
  int rank = 0;
  for (const auto& f : d.findings) {
    Json e;
    e["steps"] = f.evidence.steps;
    e["share"] = share(f.evidence.share);
    e["examples"] = f.evidence.examples;
    e["detail"] = f.evidence.detail;
    Json o;
    o["rank"] = ++rank;
    o["class"] = f.cls;
    o["share"] = share(f.share);
    o["severity"] = profiler::severity_name(f.severity);
    o["title"] = f.title;
    o["explanation"] = f.explanation;
    o["evidence"] = std::move(e);
    o["knobs"] = f.knobs;
    if (f.predicted_step_ms >= 0) {
      o["predicted_step_ms"] = sig6(f.predicted_step_ms);
      o["prediction"] = f.prediction;
    }
    findings.push_back(std::move(o));
  }
  j["findings"] = std::move(findings);
  add_ranks(j, d);
  detail::add_trace_summary_json(j, d);
  detail::add_timeline_json(j, d);
  if (d.critical_path.computed) {
    const profiler::CriticalPathSummary& cp = d.critical_path;
    Json c;
    c["success"] = cp.success;
    if (!cp.error.empty()) c["error"] = cp.error;
    c["args"] =
        Json{{"rank", cp.rank}, {"annotation", cp.annotation}, {"instance_id", cp.instance}};
    c["step"] = cp.step;
    if (cp.success) {
      c["cp_total_duration_us"] = cp.total_us;
      auto sums = [](const std::map<std::string, int64_t>& m) {
        Json o = Json::object();
        for (const auto& [k, v] : m) o[k] = Json{{"duration_sum", v}};
        return o;
      };
      c["breakdown_by_type"] = sums(cp.by_type_us);
      c["breakdown_by_bound_by"] = sums(cp.by_bound_us);
    }
    j["critical_path"] = std::move(c);
  }
  j["memory"] = Json{{"peak", whole(d.memory.peak)},
                     {"reserved", whole(d.memory.reserved)},
                     {"fragmentation", share(d.memory.fragmentation)},
                     {"alloc_retries", d.memory.alloc_retries},
                     {"ooms", d.memory.ooms},
                     {"page_faults", d.memory.page_faults}};
  j["loss_health"] = Json{{"verdict", d.loss_health.verdict},
                          {"has_nan", d.loss_health.has_nan},
                          {"diverged", d.loss_health.diverged},
                          {"spikes", d.loss_health.spikes},
                          {"oscillation", sig6(d.loss_health.oscillation)}};
  Json steps = Json::array();
  Json loss_curve = Json::array();
  for (const auto& s : d.steps) {
    Json o;
    o["step"] = s.step;
    o["start_ms"] = ms(s.start_ms);
    o["wall_ms"] = ms(s.wall_ms);
    o["breakdown"] = classes(s.ms, ms);
    Json det = Json::object();
    for (const auto& [k, v] : s.detail) det[k] = ms(v);
    o["detail"] = std::move(det);
    o["loss"] = sig6(s.loss);
    o["lr"] = sig6(s.lr);
    o["grad_norm"] = sig6(s.grad_norm);
    o["mem_allocated"] = whole(s.mem_allocated);
    o["mem_reserved"] = whole(s.mem_reserved);
    o["tokens_per_s"] = sig6(s.tokens_per_s);
    steps.push_back(std::move(o));
    loss_curve.push_back(Json::array({s.step, sig6(s.loss)}));
  }
  j["steps"] = std::move(steps);
  j["loss_curve"] = std::move(loss_curve);
  Json timeline = Json::array();
  for (const auto& [t, b] : d.memory_timeline) timeline.push_back(Json::array({ms(t), whole(b)}));
  j["memory_timeline"] = std::move(timeline);
  j["config"] = d.config;
  j["environment"] = d.environment;
  return j;
}

}  // namespace

// Names from traces may hold invalid UTF-8: replace it rather than throw.
std::string render_json(const Diagnosis& d) {
  return build_json(d).dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

namespace detail {
std::string render_json_compact(const Diagnosis& d) {
  return build_json(d).dump(-1, ' ', false, Json::error_handler_t::replace);
}
}  // namespace detail

Diagnosis parse_report_json(std::string_view text, const std::string& origin) {
  return profiler::diagnosis_from_json_text(text, origin);
}

profiler::Diagnosis read_report_json(const std::filesystem::path& path) {
  return profiler::read_diagnosis_file(path);
}

void write_reports(const Diagnosis& d, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw IoError(
        fmt::format("{}: cannot create report directory: {}", dir.string(), ec.message()));
  // Rendered on the machine's cores and written all or none (an AtomicFileSet: an error leaves
  // no partial set behind). Each file is staged (written and fsynced on a thread of its own) as
  // soon as its text is ready, so that the disk's flushes overlap the rendering of the others.
  // report.json's tree is built once, for its own text and for report.html's data, while
  // report.html's body is rendered.
  std::array<std::string, 3> text;
  std::string html_body, compact;
  AtomicFileSet files;
  parallel_for(2, [&](size_t i) {
    if (i == 0) {
      const Json j = build_json(d);
      text[0] = j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
      files.stage(dir / "report.json", text[0]);
      compact = j.dump(-1, ' ', false, Json::error_handler_t::replace);
    } else {
      text[1] = render_markdown(d);
      files.stage(dir / "report.md", text[1]);
      html_body = detail::html_body(d);
    }
  });
  text[2] = detail::html_page(html_body, compact);
  files.stage(dir / "report.html", text[2]);
  files.commit();
}

}  // namespace ft::reports
