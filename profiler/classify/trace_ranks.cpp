// trace_ranks.cpp: diagnosis of every rank of an imported (Kineto) run: each rank classified on
// its own, one row per rank, and the straggler named with what it does that the others do not.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ft/core/error.h"
#include "ft/core/parallel.h"
#include "ft/profiler/classifier.h"
#include "ft/profiler/findings.h"
#include "ft/profiler/kineto_reader.h"
#include "ft/profiler/multi_rank.h"
#include "rules.h"
#include "step_replay.h"

namespace ft::profiler {
namespace {

std::string meta(const Trace& t, const char* key) {
  const auto it = t.metadata.find(key);
  return it == t.metadata.end() ? std::string() : it->second;
}

// What the straggler does that the other ranks do not: the span name whose time per step
// exceeds the other ranks' mean the most (among names within 80% of that excess, the one holding
// the least time: the most specific). Returns "" when nothing stands out.
std::string straggler_cause(const std::vector<Trace>& ranks, const std::vector<Diagnosis>& per,
                            size_t straggler, const std::vector<RunInfo>& runs, std::string* span) {
  std::vector<std::map<std::string, double>> by_rank;
  for (size_t r = 0; r < ranks.size(); ++r)
    by_rank.push_back(rules::span_ms_by_name(ranks[r], steady_steps(per[r].steps, runs[r]), false));
  auto others_mean = [&](const std::string& name) {
    double sum = 0;
    for (size_t r = 0; r < ranks.size(); ++r) {
      if (r == straggler) continue;
      const auto it = by_rank[r].find(name);
      sum += it == by_rank[r].end() ? 0 : it->second;
    }
    return sum / static_cast<double>(ranks.size() - 1);
  };
  std::map<std::string, double> excess;
  double top = 0;
  for (const auto& [name, ms] : by_rank[straggler]) {
    excess[name] = ms - others_mean(name);
    top = std::max(top, excess[name]);
  }
  if (top <= 0) return "";
  std::string best;
  double best_ms = 0;
  for (const auto& [name, x] : excess) {
    if (x < 0.8 * top) continue;
    const double ms = by_rank[straggler].at(name);
    if (best.empty() || ms < best_ms) best = name, best_ms = ms;
  }
  *span = best;
  return fmt::format(
      "'{}' takes {:.2f} ms per step on rank {} against {:.2f} ms on the other "
      "ranks",
      best, best_ms, trace_rank(ranks[straggler]), others_mean(best));
}

RankBreakdown rank_row(const Trace& t, const Diagnosis& d, const RunInfo& run) {
  RankBreakdown row;
  row.rank = trace_rank(t);
  const auto steady = steady_steps(d.steps, run);
  row.steps = static_cast<int64_t>(steady.size());
  double wall = 0, wait = 0, transfer = 0;
  for (const StepBreakdown* s : steady) {
    wall += s->wall_ms;
    for (const auto& [k, v] : s->detail) {
      if (k == "comm.wait" || k.ends_with("idle.comm.sync")) wait += v;
      if (k == "comm.transfer") transfer += v;
    }
  }
  const double n = std::max<double>(1, static_cast<double>(steady.size()));
  row.step_ms = wall / n;
  row.totals = d.totals;
  row.exposed_comm_ms = (d.totals[static_cast<int>(WaitClass::kComm)] +
                         d.totals[static_cast<int>(WaitClass::kSync)]) *
                        row.step_ms;
  row.exposed_wait_ms = wait / n;
  row.collective_ms = (wait + transfer) / n;
  row.collective_sync_ms = wait / n;
  return row;
}

// The straggler's fix re-run on every rank's step graph (GPU ranks): the late rank without its
// extra work (`span`), every other rank without waiting for late ranks in its collectives; in
// lockstep the step becomes the slowest of those. Sets the parallel finding's prediction, or
// leaves the rule's estimate with the reason when a rank's graph cannot be re-run.
void predict_straggler_fix(const std::vector<Trace>& ranks, const std::vector<Diagnosis>& per,
                           const std::vector<RunInfo>& runs, size_t late, const std::string& span,
                           Finding* f) {
  double slowest = 0;
  std::string parts;
  for (size_t r = 0; r < ranks.size(); ++r) {
    replay::StepReplay run(ranks[r], steady_steps(per[r].steps, runs[r]));
    if (!run.has_device()) return;  // CPU ranks: the rule's estimate, as predict_findings said
    std::string why = run.why();
    replay::WhatIf w;
    if (r == late) {
      if (span.empty() || run.graph().mark_spans(ranks[r], span) == 0)
        why = "nothing on the late rank stands out to remove";
      w.remove_marked = true;
    } else {
      w.no_late_ranks = true;
    }
    if (!why.empty()) {
      f->prediction += fmt::format("; rule estimate: rank {}: {}", trace_rank(ranks[r]), why);
      return;
    }
    const double own = run.step_ms() - run.saving_ms(w);
    slowest = std::max(slowest, own);
    parts +=
        fmt::format("{}rank {} {:.2f} ms", parts.empty() ? "" : ", ", trace_rank(ranks[r]), own);
  }
  double step = 0;  // the diagnosis's view: the first rank's mean steady step
  const auto steady = steady_steps(per[0].steps, runs[0]);
  for (const StepBreakdown* s : steady) step += s->wall_ms;
  step /= static_cast<double>(std::max<size_t>(1, steady.size()));
  const std::string rule = f->predicted_step_ms >= 0 ? fmt::format("; the rule estimated {:.2f} ms",
                                                                   step - f->predicted_step_ms)
                                                     : "";
  f->predicted_step_ms = std::min(step, slowest);
  f->prediction = fmt::format(
      "step graphs of every rank re-run: rank {} without '{}', the others without waiting for "
      "late ranks in their collectives ({}); in lockstep the step is the slowest of them (from "
      "{:.2f} ms on rank {}, saving {:.2f} ms{})",
      trace_rank(ranks[late]), span, parts, step, trace_rank(ranks[0]), step - f->predicted_step_ms,
      rule);
}

}  // namespace

Diagnosis diagnose_trace_ranks(const std::vector<Trace>& ranks, const ClassifyOptions& options,
                               const FindingRules& rules) {
  if (ranks.empty()) throw FormatError("no ranks to diagnose");
  if (ranks.size() == 1) return diagnose(ranks[0], options, rules);
  // Each rank's diagnosis is its own: they run on the machine's cores.
  std::vector<Diagnosis> per(ranks.size());
  parallel_for(ranks.size(), [&](size_t r) { per[r] = diagnose(ranks[r], options, rules); });
  std::vector<RunInfo> runs;
  for (const Trace& t : ranks) runs.push_back(RunInfo::from_metadata(t.metadata));
  Diagnosis d = per[0];
  const Trace& first = ranks[0];
  for (size_t r = 0; r < ranks.size(); ++r) {  // every rank's input warnings, said per rank
    if (r == 0) d.warnings.clear();
    for (const std::string& w : per[r].warnings)
      d.warnings.push_back(fmt::format("rank {}: {}", trace_rank(ranks[r]), w));
  }
  const int64_t straggler = rules::meta_int(first, "run.straggler_rank", -1);
  ParallelSummary& p = d.parallel;
  p.ranks = static_cast<int>(ranks.size());
  p.dp = p.ranks;
  p.collectives = rules::meta_int(first, "run.comm_collectives", 0);
  const std::string source = meta(first, "run.rank_source");
  p.clock = fmt::format(
      "each rank's own (not compared across ranks: the rank that arrives last at a collective "
      "is the one whose call is shortest); rank numbers: {}",
      source.empty() ? std::string("from the trace") : source);
  for (size_t r = 0; r < ranks.size(); ++r) {
    RankBreakdown row = rank_row(ranks[r], per[r], runs[r]);
    row.host = meta(ranks[r], "run.rank_key");
    d.ranks.push_back(row);
    p.transfer_ms +=
        (row.collective_ms - row.collective_sync_ms) / static_cast<double>(ranks.size());
    p.sync_ms += row.collective_sync_ms / static_cast<double>(ranks.size());
  }
  if (straggler >= 0) {
    p.straggler = static_cast<int>(straggler);
    const int64_t late = rules::meta_int(first, "run.straggler_late", 0);
    p.straggler_late_frac =
        p.collectives > 0 ? static_cast<double>(late) / static_cast<double>(p.collectives) : 0;
    size_t s = 0;
    for (size_t r = 0; r < ranks.size(); ++r)
      if (trace_rank(ranks[r]) == straggler) s = r;
    double others_wait = 0;
    for (size_t r = 0; r < ranks.size(); ++r)
      if (r != s) others_wait += d.ranks[r].collective_sync_ms;
    p.straggler_late_ms = others_wait / static_cast<double>(ranks.size() - 1);
    std::string span;
    const std::string cause = straggler_cause(ranks, per, s, runs, &span);
    for (Finding& f : d.findings) {
      if (f.cls != "parallel") continue;
      if (!cause.empty()) {
        f.explanation += " On this run: " + cause + ".";
        f.evidence.examples.insert(f.evidence.examples.begin(), cause);
      }
      if (f.share > 0) predict_straggler_fix(ranks, per, runs, s, span, &f);
    }
  }
  // A finding that only another rank shows (its own top class) is named too; the straggler's
  // own cause is in the straggler finding already.
  for (size_t r = 1; r < ranks.size(); ++r) {
    if (trace_rank(ranks[r]) == straggler) continue;
    for (const Finding& f : per[r].findings) {
      if (f.share <= 0 || f.cls == "parallel") continue;
      const bool known = std::any_of(d.findings.begin(), d.findings.end(),
                                     [&](const Finding& g) { return g.cls == f.cls; });
      if (known) continue;
      Finding g = f;
      g.title = fmt::format("Rank {}: {}", trace_rank(ranks[r]), f.title);
      d.findings.push_back(std::move(g));
      break;  // its top one
    }
  }
  rank_findings(&d.findings);
  return d;
}

}  // namespace ft::profiler
