// markdown_report.cpp: report.md (summary, class totals, ranked findings, steps, memory, loss,
// config).
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "format.h"
#include "ft/reports/report.h"

namespace ft::reports {
namespace {

using detail::abbreviated_rows;
using detail::bytes_h;
using detail::fixed;
using detail::known_percent;
using detail::percent;
using detail::recorded_bytes;
using detail::RunSummary;
using detail::slowest_steps;
using detail::step_ranges;
using detail::summarize;
using detail::tokens_rate;
using profiler::Diagnosis;
using profiler::kNumWaitClasses;
using profiler::WaitClass;

constexpr size_t kStepRowLimit = 40;  // longer runs: first 20, last 20, plus the slowest steps
constexpr size_t kSlowestListed = 5;

std::string md(std::string_view s) { return markdown_escape(s); }

// A knob as inline code when that is safe, else as escaped text.
std::string knob(std::string_view k) {
  if (k.find_first_of("`\n\r<>&|") == std::string_view::npos && !k.empty()) {
    return fmt::format("`{}`", k);
  }
  return md(k);
}

std::string yes_no(bool b) { return b ? "yes" : "no"; }

void step_row(std::string& out, const profiler::StepBreakdown& s) {
  out += fmt::format("| {} | {} |", s.step, fixed(s.wall_ms, 2));
  for (int c = 0; c < kNumWaitClasses; ++c) out += fmt::format(" {} |", fixed(s.ms[c], 2));
  // No tokens recorded (an imported trace): n/a, not 0.
  out += fmt::format(" {} | {} |\n", std::isnan(s.loss) ? "n/a" : fixed(s.loss, 4),
                     s.tokens_per_s > 0 ? fixed(s.tokens_per_s, 0) : std::string("n/a"));
}

void map_table(std::string& out, const std::map<std::string, std::string>& m, const char* key) {
  if (m.empty()) {
    out += "(none recorded)\n\n";
    return;
  }
  out += fmt::format("| {} | value |\n|---|---|\n", key);
  for (const auto& [k, v] : m) out += fmt::format("| {} | {} |\n", md(k), md(v));
  out += "\n";
}

// HTA's critical path of the first steady step (imported traces).
void critical_path_section(std::string& out, const Diagnosis& d) {
  const profiler::CriticalPathSummary& cp = d.critical_path;
  if (!cp.computed) return;
  out += "## Critical path (HTA's analysis)\n\n";
  if (!cp.success) {
    out += fmt::format("Not available: {}\n\n", md(cp.error));
    return;
  }
  out += fmt::format("Step {} (instance {} of `{}` on rank {}): {} µs on the critical path.\n\n",
                     cp.step, cp.instance, md(cp.annotation), cp.rank, cp.total_us);
  out += "| edge type | µs | share |\n|---|---:|---:|\n";
  for (const auto& [k, v] : cp.by_type_us) {
    out += fmt::format("| {} | {} | {} |\n", md(k), v,
                       percent(cp.total_us > 0 ? static_cast<double>(v) / cp.total_us : 0));
  }
  out += "\n| bound by | µs | share |\n|---|---:|---:|\n";
  for (const auto& [k, v] : cp.by_bound_us) {
    out += fmt::format("| {} | {} | {} |\n", md(k.empty() ? std::string("(dependency)") : k), v,
                       percent(cp.total_us > 0 ? static_cast<double>(v) / cp.total_us : 0));
  }
  out += "\n";
}

// Multi-rank runs: the cross-rank summary and one row per rank.
void ranks_section(std::string& out, const Diagnosis& d) {
  if (d.ranks.empty()) return;
  const auto& p = d.parallel;
  out += "## Ranks\n\n";
  out +=
      fmt::format("{} ranks · dp {} · tp {} · pp {} · {} micro-batch(es) per step · clock: {}\n\n",
                  p.ranks, p.dp, p.tp, p.pp, p.micro_batches, md(p.clock));
  out += fmt::format(
      "Collectives matched across ranks: {}; per rank per step: transfer {} ms (the minimum "
      "duration of each collective over its ranks), synchronizing {} ms (waiting for the slowest "
      "rank).",
      p.collectives, fixed(p.transfer_ms, 3), fixed(p.sync_ms, 3));
  if (p.straggler >= 0) {
    out += fmt::format(" Straggler: rank {}, late by {} ms at {} of comparable collectives.",
                       p.straggler, fixed(p.straggler_late_ms, 3), percent(p.straggler_late_frac));
  } else {
    out += " No straggler.";
  }
  if (p.bubble >= 0) {
    out += fmt::format(" Pipeline bubble {} (theory (p-1)/m = {}).", percent(p.bubble),
                       percent(p.bubble_theory));
  }
  out +=
      "\n\n| rank | host | dp | tp | pp | step ms | compute | data | comm | sync | other | exposed "
      "comm ms | waiting ms | in collectives ms | synchronizing ms | late / compared | late ms | "
      "bubble "
      "|\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
      "---:|\n";
  auto share_of = [](const profiler::RankBreakdown& r, WaitClass c) {
    return percent(r.totals[static_cast<int>(c)]);
  };
  for (const auto& r : d.ranks) {
    out += fmt::format(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} "
        "| "
        "{} |\n",
        r.rank, md(r.host), r.dp_rank, r.tp_rank, r.pp_stage, fixed(r.step_ms, 2),
        share_of(r, WaitClass::kCompute), share_of(r, WaitClass::kData),
        share_of(r, WaitClass::kComm), share_of(r, WaitClass::kSync),
        share_of(r, WaitClass::kOther), fixed(r.exposed_comm_ms, 3), fixed(r.exposed_wait_ms, 3),
        fixed(r.collective_ms, 3), fixed(r.collective_sync_ms, 3), r.late, r.collectives,
        fixed(r.late_ms, 3), r.bubble < 0 ? "n/a" : percent(r.bubble));
  }
  out += "\n";
}

}  // namespace

std::string render_markdown(const Diagnosis& d) {
  const RunSummary sum = summarize(d);
  std::string out = "# ft diagnosis report\n\n";
  if (!d.source.empty()) out += fmt::format("Source: {}\n\n", md(d.source));
  if (!d.steps_rule.empty()) out += fmt::format("Steps: {}\n\n", md(d.steps_rule));
  out += fmt::format(
      "**Summary:** {} · MFU {} · step time {} ms mean (median {}, min {}, max {}) over "
      "{} steps · loss {}\n\n",
      tokens_rate(d.tokens_per_s), known_percent(d.mfu), fixed(sum.mean_ms, 2),
      fixed(sum.median_ms, 2), fixed(sum.min_ms, 2), fixed(sum.max_ms, 2), sum.steps,
      d.loss_health.verdict.empty() ? "n/a" : md(d.loss_health.verdict));
  if (!d.findings.empty()) {
    const auto& f = d.findings.front();
    out +=
        fmt::format("**Top finding:** {} ({}, {})\n\n", md(f.title), md(f.cls), percent(f.share));
  }
  if (!d.warnings.empty()) {
    out += "## Input warnings\n\n";
    for (const std::string& w : d.warnings) out += "- " + md(w) + "\n";
    out += "\n";
  }

  out +=
      "## Where the time goes\n\n"
      "| class | share of steady-state wall time | ms per step (all steps) |\n|---|---:|---:|\n";
  for (int c = 0; c < kNumWaitClasses; ++c) {
    const double per_step = sum.steps ? sum.class_ms[c] / static_cast<double>(sum.steps) : 0.0;
    out += fmt::format("| {} | {} | {} |\n", profiler::wait_class_name(WaitClass(c)),
                       percent(d.totals[c]), fixed(per_step, 2));
  }
  out += "\n";

  out += "## Findings\n\n";
  if (d.findings.empty()) out += "No findings.\n\n";
  int rank = 0;
  for (const auto& f : d.findings) {
    out += fmt::format("### {}. [{}] {}: {}\n\n", ++rank, profiler::severity_name(f.severity),
                       md(f.cls), md(f.title));
    if (f.share > 0) out += fmt::format("Recoverable: {} of wall time.\n\n", percent(f.share));
    if (f.predicted_step_ms >= 0) {
      out += fmt::format("Predicted step: {} ms, assuming {}.\n\n", fixed(f.predicted_step_ms, 2),
                         md(f.prediction));
    }
    if (!f.explanation.empty()) out += md(f.explanation) + "\n\n";
    const auto& e = f.evidence;
    if (!e.steps.empty()) {
      out += fmt::format("- Steps: {}", md(step_ranges(e.steps)));
      if (e.share > 0) out += fmt::format(" ({} of wall time)", percent(e.share));
      out += "\n";
    } else if (e.share > 0) {
      out += fmt::format("- Share: {} of wall time\n", percent(e.share));
    }
    if (!e.detail.empty()) out += fmt::format("- Detail: {}\n", md(e.detail));
    if (!e.examples.empty()) {
      out += "- Examples:\n";
      for (const auto& x : e.examples) out += fmt::format("  - {}\n", md(x));
    }
    if (!f.knobs.empty()) {
      out += "- Knobs:";
      for (size_t i = 0; i < f.knobs.size(); ++i) out += (i ? ", " : " ") + knob(f.knobs[i]);
      out += "\n";
    }
    out += "\n";
  }

  ranks_section(out, d);
  out += detail::trace_summary_markdown(d);
  critical_path_section(out, d);
  out += d.ranks.empty() ? "## Steps\n\n" : "## Steps (rank 0)\n\n";
  if (d.steps.empty()) {
    out += "No steps recorded.\n\n";
  } else {
    out += "| step | wall ms |";
    for (int c = 0; c < kNumWaitClasses; ++c)
      out += fmt::format(" {} |", profiler::wait_class_name(WaitClass(c)));
    out += " loss | tokens/s |\n|---:|---:|";
    for (int c = 0; c < kNumWaitClasses; ++c) out += "---:|";
    out += "---:|---:|\n";
    const auto rows = abbreviated_rows(d.steps.size(), kStepRowLimit);
    for (size_t i = 0; i < rows.size(); ++i) {
      if (i > 0 && rows[i] != rows[i - 1] + 1) {
        out += fmt::format("| … | {} steps omitted |", rows[i] - rows[i - 1] - 1);
        for (int c = 0; c < kNumWaitClasses + 2; ++c) out += "  |";
        out += "\n";
      }
      step_row(out, d.steps[rows[i]]);
    }
    out += "\n";
    if (rows.size() < d.steps.size()) {
      out += "Slowest steps:";
      const auto slow = slowest_steps(d, kSlowestListed);
      for (size_t i = 0; i < slow.size(); ++i) {
        const auto& s = d.steps[slow[i]];
        out += fmt::format("{} {} ({} ms)", i ? "," : "", s.step, fixed(s.wall_ms, 2));
      }
      out += "\n\n";
    }
  }

  out +=
      "## Memory\n\n| peak | reserved | fragmentation | allocator retries | OOMs | page faults |\n"
      "|---:|---:|---:|---:|---:|---:|\n";
  out += fmt::format("| {} | {} | {} | {} | {} | {} |\n\n", recorded_bytes(d.memory.peak),
                     recorded_bytes(d.memory.reserved), percent(d.memory.fragmentation),
                     d.memory.alloc_retries, d.memory.ooms, d.memory.page_faults);

  const auto& lh = d.loss_health;
  out += "## Loss health\n\n";
  out += fmt::format("Verdict: **{}** · NaN: {} · diverged: {} · spikes: {} · oscillation: {}\n\n",
                     lh.verdict.empty() ? "n/a" : md(lh.verdict), yes_no(lh.has_nan),
                     yes_no(lh.diverged), lh.spikes, fixed(lh.oscillation, 3));

  out += "## Configuration\n\n";
  map_table(out, d.config, "flag");
  out += "## Environment\n\n";
  map_table(out, d.environment, "key");
  while (out.size() >= 2 && out[out.size() - 1] == '\n' && out[out.size() - 2] == '\n')
    out.pop_back();
  return out;
}

}  // namespace ft::reports
