// diagnose.cpp: a whole Diagnosis from a trace (partition, totals, memory, loss health, findings)
// and CI gates.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>

#include "ft/core/error.h"
#include "ft/core/parallel.h"
#include "ft/profiler/findings.h"
#include "ft/profiler/loss_health.h"
#include "step_replay.h"

namespace ft::profiler {

Diagnosis diagnose(const Trace& trace, const ClassifyOptions& options, const FindingRules& rules) {
  Diagnosis d;
  d.source = trace.source;
  if (const auto it = trace.metadata.find("run.iterations"); it != trace.metadata.end())
    d.steps_rule = it->second;
  const RunInfo run = RunInfo::from_metadata(trace.metadata);
  d.steps = classify_steps(trace, options);
  const auto steady = steady_steps(d.steps, run);
  double wall = 0;
  for (const StepBreakdown* s : steady) {
    wall += s->wall_ms;
    for (int i = 0; i < kNumWaitClasses; ++i) d.totals[i] += s->ms[i];
  }
  for (double& x : d.totals) x = wall > 0 ? x / wall : 0;

  // Loss series: a step with a loss counter contributes it (NaN included); others are skipped.
  // Memory counters or run facts present: memory was recorded (legacy PyTorch traces have none).
  std::map<int64_t, double> loss_by_step, mfu_by_step, produce_by_step;
  bool memory_recorded = run.mem_peak > 0 || run.mem_reserved_peak > 0;
  for (const Event& ev : trace.events) {
    if (ev.phase != Phase::kCounter || ev.name >= trace.names.size()) continue;
    const std::string& name = trace.names.at(ev.name);
    if (name == kCounterMemAllocated || name == kCounterMemReserved || name == kCounterMemPeak)
      memory_recorded = true;
    if (ev.step < 0) continue;
    if (name == kCounterLoss) loss_by_step[ev.step] = ev.value;
    if (name == kCounterMfu) mfu_by_step[ev.step] = ev.value;
    if (name == kCounterDataProduceMs) produce_by_step[ev.step] = ev.value;
  }
  std::vector<double> losses;
  for (const auto& [step, v] : loss_by_step) losses.push_back(v);
  d.loss_health = assess_loss(losses);

  double tps = 0, mfu = 0;
  int ntps = 0, nmfu = 0;
  for (const StepBreakdown* s : steady) {
    if (s->tokens_per_s > 0) tps += s->tokens_per_s, ++ntps;
    if (mfu_by_step.count(s->step)) mfu += mfu_by_step[s->step], ++nmfu;
  }
  // Not recorded (an imported trace knows no tokens or peak), not zero: NaN ("unknown" in the
  // reports, null in report.json).
  const double unknown = std::numeric_limits<double>::quiet_NaN();
  d.tokens_per_s = ntps ? tps / ntps : unknown;
  d.mfu = run.mfu >= 0 ? run.mfu : (nmfu ? mfu / nmfu : unknown);
  RunInfo facts = run;
  if (facts.mfu < 0 && nmfu) facts.mfu = d.mfu;
  double produce = 0;
  int nproduce = 0;
  for (const StepBreakdown* s : steady) {
    if (const auto it = produce_by_step.find(s->step); it != produce_by_step.end()) {
      produce += it->second;
      ++nproduce;
    }
  }
  if (facts.data_produce_ms < 0 && nproduce) facts.data_produce_ms = produce / nproduce;

  double peak_alloc = 0, peak_reserved = 0;
  for (const StepBreakdown& s : d.steps) {
    peak_alloc = std::max(peak_alloc, s.mem_allocated);
    peak_reserved = std::max(peak_reserved, s.mem_reserved);
    d.memory_timeline.emplace_back(s.start_ms + s.wall_ms, s.mem_allocated);
    const auto it = s.detail.find("page_faults.count");
    if (it != s.detail.end()) d.memory.page_faults += static_cast<int64_t>(it->second);
  }
  d.memory.peak = run.mem_peak > 0 ? run.mem_peak : peak_alloc;
  d.memory.reserved = run.mem_reserved_peak > 0 ? run.mem_reserved_peak : peak_reserved;
  d.memory.fragmentation = d.memory.reserved > 0 ? 1.0 - d.memory.peak / d.memory.reserved : 0;
  d.memory.alloc_retries = run.alloc_retries;
  d.memory.ooms = run.ooms;
  if (facts.mem_peak <= 0) facts.mem_peak = d.memory.peak;
  if (facts.mem_reserved_peak <= 0) facts.mem_reserved_peak = d.memory.reserved;

  for (const auto& [k, v] : trace.metadata) {
    if (k.rfind("config.", 0) == 0) d.config[k.substr(7)] = v;
    if (k.rfind("env.", 0) == 0) d.environment[k.substr(4)] = v;
  }
  // Five independent jobs on the machine's cores, the longest first (on df_index_resolver the
  // step graph ~40 ms, on its 10x tile the summary's sorts ~150 ms): the step graph, on which
  // the findings' predictions are then re-run (built even when no finding needs it: it costs
  // an otherwise idle core), the summary, the rules with their estimates, the input warnings,
  // the timeline. Each job writes its own fields.
  std::optional<replay::StepReplay> graph;
  parallel_for(5, [&](size_t job) {
    switch (job) {
      case 0:
        graph.emplace(trace, steady);
        break;
      case 1:
        d.trace_summary = summarize_trace(trace, steady);
        break;
      case 2:
        d.findings = find_issues(trace, d.steps, facts, d.loss_health, rules);
        predict_findings(steady, &d.findings, host_lead_ms(trace, steady));
        break;
      case 3:
        d.warnings = input_warnings(trace, d.steps);
        break;
      default:
        d.timeline = build_timeline(trace, steady);
        break;
    }
  });
  replay::replay_predictions(*graph, &d.findings, rules);
  if (!memory_recorded) {
    // Not recorded, not zero: NaN ("not recorded" in the reports, null in report.json).
    d.memory.peak = d.memory.reserved = d.memory.fragmentation = unknown;
    d.memory_timeline.clear();
    for (StepBreakdown& s : d.steps) s.mem_allocated = s.mem_reserved = unknown;
  }
  return d;
}

Gate parse_gate(const std::string& text) {
  Gate g;
  g.text = text;
  const auto gt = text.find('>');
  if (gt == std::string::npos || gt == 0) {
    throw ConfigError(fmt::format("--fail-if '{}': expected CLASS>PCT, e.g. data>20%", text));
  }
  g.cls = text.substr(0, gt);
  std::string num = text.substr(gt + 1);
  if (!num.empty() && num.back() == '%') num.pop_back();
  char* end = nullptr;
  g.pct = std::strtod(num.c_str(), &end);
  if (num.empty() || end != num.c_str() + num.size() || !std::isfinite(g.pct) || g.pct < 0 ||
      g.pct > 100) {
    throw ConfigError(fmt::format("--fail-if '{}': '{}' is not a percentage in [0, 100]", text,
                                  text.substr(gt + 1)));
  }
  bool known = false;
  for (int i = 0; i < kNumWaitClasses; ++i)
    known |= g.cls == wait_class_name(static_cast<WaitClass>(i));
  for (const char* c : {"precision", "batch", "loss", "environment", "parallel"})
    known |= g.cls == c;
  if (!known) {
    throw ConfigError(fmt::format(
        "--fail-if '{}': unknown class '{}' (compute, data, pcie, comm, memory, host, sync, other, "
        "precision, batch, loss, environment, parallel)",
        text, g.cls));
  }
  return g;
}

std::vector<std::string> check_gates(const Diagnosis& d, const std::vector<Gate>& gates) {
  std::vector<std::string> tripped;
  for (const Gate& g : gates) {
    int wc = -1;
    for (int i = 0; i < kNumWaitClasses; ++i) {
      if (g.cls == wait_class_name(static_cast<WaitClass>(i))) wc = i;
    }
    if (wc >= 0) {
      const double pct = 100 * d.totals[wc];
      if (pct > g.pct)
        tripped.push_back(fmt::format("{}: {} is {:.1f}% of step time", g.text, g.cls, pct));
      continue;
    }
    double best = 0;
    bool risk = false;
    for (const Finding& f : d.findings) {
      if (f.cls != g.cls) continue;
      best = std::max(best, f.share);
      risk |= f.share == 0 && f.severity != Severity::kInfo;
    }
    if (100 * best > g.pct) {
      tripped.push_back(fmt::format("{}: {} finding recovers {:.1f}%", g.text, g.cls, 100 * best));
    } else if (risk) {
      tripped.push_back(fmt::format("{}: {} finding at warning or above", g.text, g.cls));
    }
  }
  return tripped;
}

}  // namespace ft::profiler
