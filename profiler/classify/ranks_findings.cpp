// ranks_findings.cpp: diagnose_ranks: per-rank table, cross-rank summary and the communication,
// straggler and pipeline-bubble findings.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "ft/core/error.h"
#include "ft/profiler/multi_rank.h"
#include "ranks_internal.h"

namespace ft::profiler {
namespace {

std::string meta(const Trace& t, const char* key, const std::string& fallback = "") {
  const auto it = t.metadata.find(key);
  return it == t.metadata.end() ? fallback : it->second;
}
double meta_num(const Trace& t, const char* key, double fallback) {
  const std::string v = meta(t, key);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  return !v.empty() && *end == '\0' && std::isfinite(x) ? x : fallback;
}

double per_step_ms(int64_t ns, const RankData& rd) {
  return rd.steps > 0 ? static_cast<double>(ns) / rd.steps / 1e6 : 0.0;
}
double share_of(int64_t ns, const RankData& rd) {
  return rd.wall_ns > 0 ? static_cast<double>(ns) / static_cast<double>(rd.wall_ns) : 0.0;
}
Severity severity_of(double share, const FindingRules& r) {
  return share >= r.critical_share ? Severity::kCritical : Severity::kWarning;
}

// Training-thread exposed comm not explained by a straggler or the pipeline bubble.
void comm_finding(std::vector<Finding>* out, const std::vector<RankData>& rs, const CrossRank& x,
                  const FindingRules& rules) {
  double share = 0;
  std::string per_rank;
  for (const RankData& rd : rs) {
    const int64_t own = length(rd.exposed) - rd.exposed_idle_ns - rd.exposed_straggler_wait_ns;
    share += share_of(std::max<int64_t>(own, 0), rd) / static_cast<double>(rs.size());
    per_rank +=
        fmt::format("{}rank {} {:.2f} ms (waiting {:.2f})", per_rank.empty() ? "" : ", ", rd.rank,
                    per_step_ms(length(rd.exposed), rd), per_step_ms(rd.exposed_wait_ns, rd));
  }
  if (share <= rules.comm_share) return;
  const Trace& t0 = *rs[0].trace;
  const bool overlap = meta(t0, "config.overlap", "true") != "false";
  const double bucket = meta_num(t0, "config.bucket_mb", 25);
  const int accum = static_cast<int>(meta_num(t0, "config.grad_accum", 1));
  const int micro = static_cast<int>(meta_num(t0, "config.micro_batch", 1));
  const double n = static_cast<double>(rs.size()) * std::max<double>(1, rs[0].steps);
  Finding f;
  f.cls = "comm";
  f.share = share;
  f.severity = severity_of(share, rules);
  f.title = fmt::format("Communication is exposed ({:.1f}% of step time, mean over {} ranks)",
                        100 * share, rs.size());
  f.explanation = fmt::format(
      "Each rank's training thread blocks on collectives instead of computing. {}Fewer, larger "
      "all-reduces amortise their fixed cost: bigger gradient buckets, or more tokens per "
      "all-reduce (more accumulation or a bigger micro-batch).",
      overlap ? ""
              : "Gradient overlap is off: the buckets could be all-reduced on the "
                "communication thread while backward still runs. ");
  f.evidence.share = share;
  f.evidence.detail = fmt::format(
      "exposed comm per step: {}; matched collectives {}, per rank per step transfer {:.2f} ms, "
      "synchronizing {:.2f} ms; overlap {}, bucket {:g} MiB",
      per_rank, x.collectives, static_cast<double>(x.transfer_ns) / n / 1e6,
      static_cast<double>(x.sync_ns) / n / 1e6, overlap ? "on" : "off", bucket);
  if (!overlap) f.knobs.push_back("--overlap true");
  f.knobs.push_back(fmt::format("--bucket-mb {:g}", 2 * bucket));
  f.knobs.push_back(
      fmt::format("--grad-accum {} (more accumulation per all-reduce)", std::max(2, 2 * accum)));
  f.knobs.push_back(
      fmt::format("--micro-batch {} (more tokens per all-reduce)", std::max(2, 2 * micro)));
  out->push_back(std::move(f));
}

void straggler_finding(std::vector<Finding>* out, const std::vector<RankData>& rs,
                       const CrossRank& x, const FindingRules& rules) {
  if (x.straggler < 0) return;
  const RankData& s = rs[static_cast<size_t>(x.straggler)];
  double share = 0, waited_ms = 0, others_compute = 0;
  for (const RankData& rd : rs) {
    if (&rd == &s) continue;
    share += share_of(rd.exposed_straggler_wait_ns, rd) / static_cast<double>(rs.size() - 1);
    waited_ms += per_step_ms(rd.exposed_straggler_wait_ns, rd) / static_cast<double>(rs.size() - 1);
    others_compute += rd.d.totals[static_cast<int>(WaitClass::kCompute)] *
                      per_step_ms(rd.wall_ns, rd) / static_cast<double>(rs.size() - 1);
  }
  if (share <= rules.comm_share / 2) return;
  const double late_ms = median_ms(s.margins);
  const double frac = s.comparable > 0 ? static_cast<double>(s.late) / s.comparable : 0.0;
  Finding f;
  f.cls = "parallel";
  f.share = share;
  f.severity = severity_of(share, rules);
  f.title = fmt::format("Straggler: rank {} arrives late by {:.2f} ms at {:.0f}% of collectives",
                        s.rank, late_ms, 100 * frac);
  f.explanation =
      "A collective completes only when its last rank joins, so every other rank waits for this "
      "one. All-reduce equalises the ranks' step times, so the straggler shows by arriving last, "
      "not by a longer backward. Its extra time comes before the collectives: its own work, "
      "its data, or a loaded or slower host.";
  f.evidence.share = share;
  f.evidence.detail = fmt::format(
      "rank {} (host {}) reached {} of {} comparable collectives last by more than {:.3f} ms "
      "(median {:.2f} ms); the other ranks waited for it {:.2f} ms per step on their training "
      "threads; "
      "compute per step: rank {} {:.2f} ms, the others {:.2f} ms",
      s.rank, s.host.empty() ? "unknown" : s.host, s.late, s.comparable, x.noise_ns / 1e6, late_ms,
      waited_ms, s.rank,
      s.d.totals[static_cast<int>(WaitClass::kCompute)] * per_step_ms(s.wall_ns, s),
      others_compute);
  const Trace& t = *s.trace;
  if (meta_num(t, "run.straggle_rank", -1) == s.rank && meta_num(t, "run.straggle_work", 0) > 0)
    f.knobs.push_back("--straggle-work 0 (fault injection is on for this rank)");
  f.knobs.push_back(fmt::format("check rank {}'s host ({}) for other load", s.rank,
                                s.host.empty() ? "unknown" : s.host));
  out->push_back(std::move(f));
}

void bubble_finding(std::vector<Finding>* out, const std::vector<RankData>& rs,
                    const ParallelSummary& p, const FindingRules& rules) {
  if (p.bubble < 0) return;
  double share = 0;
  int stages = 0;
  std::string detail;
  for (const RankData& rd : rs) {
    if (!rd.has_pipeline) continue;
    share += share_of(length(rd.idle), rd);
    ++stages;
    detail += fmt::format("{}stage {} (rank {}) idle {:.2f} ms / busy {:.2f} ms per step",
                          detail.empty() ? "" : "; ", rd.lay.pp_stage, rd.rank,
                          per_step_ms(length(rd.idle), rd), per_step_ms(rd.pp_busy_ns, rd));
  }
  share /= std::max(1, stages);
  if (share <= rules.bubble_share) return;
  const int m = p.micro_batches;
  const int micro = static_cast<int>(meta_num(*rs[0].trace, "config.micro_batch", 1));
  Finding f;
  f.cls = "parallel";
  f.share = share;
  f.severity = severity_of(share, rules);
  f.title = fmt::format("Pipeline bubble {:.0f}% (theory (p-1)/m = {:.0f}%)", 100 * p.bubble,
                        100 * p.bubble_theory);
  f.explanation = fmt::format(
      "With {} stages and {} micro-batch{} per step, each stage idles while the pipeline fills "
      "and drains: about (p-1)/m of its compute time. More micro-batches per step shrink the "
      "bubble.",
      p.pp, m, m == 1 ? "" : "es");
  f.evidence.share = share;
  f.evidence.detail = fmt::format("bubble = idle / busy inside the pipeline span; {}", detail);
  if (micro >= 2 && micro % 2 == 0) {
    f.knobs.push_back(
        fmt::format("--micro-batch {} --grad-accum {} ({} micro-batches, same "
                    "global batch)",
                    micro / 2, 2 * m, 2 * m));
  }
  f.knobs.push_back(fmt::format("--grad-accum {} ({} micro-batches)", 4 * m, 4 * m));
  out->push_back(std::move(f));
}

}  // namespace

Diagnosis diagnose_ranks(const std::vector<Trace>& traces, const ClassifyOptions& options,
                         const FindingRules& rules) {
  if (traces.empty()) throw FormatError("no rank traces to diagnose");
  std::vector<RankData> rs(traces.size());
  const std::string host0 = meta(traces[0], "env.hostname");
  int64_t clock_error = 0;
  bool shifted = false;
  for (size_t i = 0; i < traces.size(); ++i) {
    RankData& rd = rs[i];
    rd.trace = &traces[i];
    rd.rank = ft_trace_rank(traces[i]);
    rd.lay = layout_of(traces[i]);
    rd.host = meta(traces[i], "env.hostname");
    if (rd.host != host0) {
      rd.offset_ns = static_cast<int64_t>(meta_num(traces[i], "run.clock_offset_ns", 0));
      clock_error = std::max(
          clock_error, static_cast<int64_t>(meta_num(traces[i], "run.clock_offset_error_ns", 0)));
      shifted = true;
    }
    rd.d = diagnose(traces[i], options, rules);
  }
  const CrossRank x = analyse_ranks(&rs, rules);

  Diagnosis d = rs[0].d;
  ParallelSummary& p = d.parallel;
  p.ranks = static_cast<int>(rs.size());
  p.dp = rs[0].lay.dp;
  p.tp = rs[0].lay.tp;
  p.pp = rs[0].lay.pp;
  p.micro_batches = static_cast<int>(meta_num(traces[0], "config.grad_accum", 1));
  p.collectives = x.collectives;
  const double rank_steps = static_cast<double>(rs.size()) * std::max<double>(1, rs[0].steps);
  p.transfer_ms = static_cast<double>(x.transfer_ns) / rank_steps / 1e6;
  p.sync_ms = static_cast<double>(x.sync_ns) / rank_steps / 1e6;
  p.clock = shifted ? fmt::format(
                          "ranks on other hosts than rank 0's shifted by their measured "
                          "clock offset (ping-pong estimate, within {:.3f} ms)",
                          clock_error / 1e6)
                    : "one host: every rank reads the same CLOCK_MONOTONIC, no offsets";
  int stages = 0;
  double bubble = 0;
  for (const RankData& rd : rs) {
    RankBreakdown b;
    b.rank = rd.rank;
    b.dp_rank = rd.lay.dp_rank;
    b.tp_rank = rd.lay.tp_rank;
    b.pp_stage = rd.lay.pp_stage;
    b.host = rd.host;
    b.steps = rd.steps;
    b.step_ms = per_step_ms(rd.wall_ns, rd);
    b.totals = rd.d.totals;
    b.exposed_comm_ms = per_step_ms(length(rd.exposed), rd);
    b.exposed_wait_ms = per_step_ms(rd.exposed_wait_ns, rd);
    b.collective_ms = per_step_ms(rd.coll_ns, rd);
    b.collective_sync_ms = per_step_ms(rd.coll_sync_ns, rd);
    b.collectives = rd.comparable;
    b.late = rd.late;
    b.late_ms = median_ms(rd.margins);
    if (rd.has_pipeline && rd.pp_busy_ns > 0) {
      b.bubble = static_cast<double>(length(rd.idle)) / static_cast<double>(rd.pp_busy_ns);
      b.bubble_ms = per_step_ms(length(rd.idle), rd);
      bubble += b.bubble;
      ++stages;
    }
    b.clock_offset_ms = rd.offset_ns / 1e6;
    d.ranks.push_back(b);
  }
  if (stages > 0) {
    p.bubble = bubble / stages;
    p.bubble_theory = static_cast<double>(p.pp - 1) / std::max(1, p.micro_batches);
  }
  if (x.straggler >= 0) {
    const RankData& s = rs[static_cast<size_t>(x.straggler)];
    p.straggler = s.rank;
    p.straggler_late_ms = median_ms(s.margins);
    p.straggler_late_frac = s.comparable > 0 ? static_cast<double>(s.late) / s.comparable : 0;
  }
  // Rank 0's "other" finding: unannotated time inside the pipeline's idle stretches is the
  // bubble's (e.g. a stage blocked handing an activation to its send thread).
  const RankData& r0 = rs[0];
  if (r0.uncovered_idle_ns > 0 && r0.wall_ns > 0) {
    for (auto it = d.findings.begin(); it != d.findings.end(); ++it) {
      if (it->cls != "other") continue;
      const double left = it->share - share_of(r0.uncovered_idle_ns, r0);
      if (left <= rules.other_share) {
        d.findings.erase(it);
      } else {
        it->share = it->evidence.share = left;
        it->title =
            fmt::format("Time outside any annotated phase ({:.1f}% of step time)", 100 * left);
        it->evidence.detail +=
            fmt::format("; {:.2f} ms/step inside pipeline idle counted as bubble",
                        per_step_ms(r0.uncovered_idle_ns, r0));
      }
      break;
    }
  }
  // Rank 0's own comm finding saw one rank; the cross-rank ones replace it.
  std::erase_if(d.findings,
                [](const Finding& f) { return f.cls == "comm" || f.cls == "parallel"; });
  std::vector<Finding> added;
  comm_finding(&added, rs, x, rules);
  straggler_finding(&added, rs, x, rules);
  bubble_finding(&added, rs, p, rules);
  d.findings.insert(d.findings.end(), added.begin(), added.end());
  rank_findings(&d.findings);
  d.source = fmt::format("{} ranks ({}); steps and totals are rank 0's", rs.size(), d.source);
  return d;
}

}  // namespace ft::profiler
