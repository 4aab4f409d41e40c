// predict_replay.cpp: each finding's predicted step time from a re-run of the rank's step graph
// (step_replay.h) with the finding's cause removed or reduced (findings.h, replay_predictions).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "device_attribution.h"
#include "ft/core/parallel.h"
#include "ft/profiler/findings.h"
#include "step_replay.h"

namespace ft::profiler {
namespace {

// The fixes the graph can express, and what each assumes.
struct Fix {
  const char* cls;
  replay::WhatIf what;
  const char* assumes;
};

std::vector<Fix> fixes(const FindingRules& rules) {
  replay::WhatIf data, memory, sync, pcie, host, precision, comm, cpu_work;
  cpu_work.no_cpu_work = true;
  comm.overlap_comm = true;
  data.no_data = true;
  memory.no_alloc = true;
  sync.no_readback = true;
  pcie.pinned_copies = true;
  pcie.pinned_speedup = rules.pinned_copy_speedup;
  host.graphs = true;
  precision.gemm_speedup = rules.tensor_core_speedup;
  return {
      {"data", data, "the loader's spans take no time (each batch handed over at once)"},
      {"memory", memory,
       "allocator calls take no time and cudaFree no longer drains the device (a warm caching "
       "allocator)"},
      {"sync", sync, "the blocking read-backs and syncs leave the step"},
      {"pcie", pcie, nullptr},  // assumes: with the pinned rate, below
      {"host", host,
       "a CUDA-graph replay: the framework's operators, the runtime calls and the dispatch glue "
       "between them (untraced stretches up to 50 us) take no time; the user's Python (python "
       "frames, annotations' own time, longer untraced stretches), the loader, the allocator "
       "and blocking calls stay; each op starts 1 us after the last on its stream and after what "
       "it waits for on another, with no other delay"},
      {"cpu_work", cpu_work,
       "the CPU operators that launch no device work (the program's CPU computation) run in "
       "loader workers ahead of the step and take no time on the training thread; dispatch, "
       "launches and everything else stay as traced"},
      {"comm", comm,
       "each collective starts with its step's first device op and runs beside the compute "
       "before the op that waits for it (bucketed during backward), at its traced duration"},
      {"precision", precision, nullptr},  // assumes: with the speed-up, below
  };
}

// Both fixes at once.
void merge(replay::WhatIf* into, const replay::WhatIf& w) {
  into->no_data |= w.no_data;
  into->no_alloc |= w.no_alloc;
  into->no_readback |= w.no_readback;
  into->pinned_copies |= w.pinned_copies;
  into->pinned_speedup = std::max(into->pinned_speedup, w.pinned_speedup);
  into->graphs |= w.graphs;
  into->gemm_speedup = std::max(into->gemm_speedup, w.gemm_speedup);
  into->overlap_comm |= w.overlap_comm;
  into->remove_marked |= w.remove_marked;
  into->no_cpu_work |= w.no_cpu_work;
  into->no_late_ranks |= w.no_late_ranks;
}

double mean_ms(const std::vector<int64_t>& ns) {
  double sum = 0;
  for (int64_t v : ns) sum += static_cast<double>(v);
  return ns.empty() ? 0 : sum / 1e6 / static_cast<double>(ns.size());
}

}  // namespace

namespace replay {

StepReplay::StepReplay(const Trace& trace, const std::vector<const StepBreakdown*>& steady) {
  Track main;
  uint32_t device_pid = 0;
  if (steady.empty() || !find_training_track(trace, &main) ||
      !device_attribution::primary_device(trace, main, &device_pid))
    return;
  int64_t t0 = std::numeric_limits<int64_t>::max();
  for (const Event& e : trace.events) t0 = std::min(t0, e.ts_ns);
  // The first steady steps, as the partition cut them (device windows on a GPU trace).
  double traced = 0;
  for (size_t i = 0; i < steady.size() && i < kMaxSteps; ++i) {
    const StepBreakdown& s = *steady[i];
    const int64_t lo = t0 + std::llround(s.start_ms * 1e6);
    windows_.emplace_back(lo, lo + std::llround(s.wall_ms * 1e6));
    traced += s.wall_ms;
    // What removing waits can save: the device's idle time and its exposed copies and
    // collectives (busy time that moves off the compute's path); not its compute.
    for (const auto& [k, v] : s.detail) {
      if (k.rfind("device.idle.", 0) == 0 || k == "device.busy.pcie" || k == "device.busy.comm")
        idle_ms_ += v;
      for (int c = 0; c < kNumWaitClasses; ++c)
        if (k.size() > 12 && k.rfind("device.idle.", 0) == 0 &&
            k.substr(12) == wait_class_name(static_cast<WaitClass>(c)))
          instant_idle_[c] += v;
    }
  }
  const auto n = static_cast<double>(windows_.size());
  traced /= n, idle_ms_ /= n;
  for (double& v : instant_idle_) v /= n;
  for (const StepBreakdown* s : steady) step_ms_ += s->wall_ms;
  step_ms_ /= static_cast<double>(steady.size());
  const int64_t lo = windows_.front().first - (windows_.front().second - windows_.front().first);
  if (!graph_.build(trace, main, device_pid, lo, windows_.back().second)) return;
  has_device_ = true;
  base_ms_ = mean_ms(graph_.replay(windows_, {}));
  steps_ = windows_.size() == 1 ? fmt::format("step {}", steady.front()->step)
                                : fmt::format("steps {}-{}", steady.front()->step,
                                              steady[windows_.size() - 1]->step);
  if (std::abs(base_ms_ - traced) > 0.01 * traced) {
    why_ = fmt::format("the step graph re-ran {} in {:.2f} ms against {:.2f} ms traced", steps_,
                       base_ms_, traced);
  } else if (graph_.linked_share() < kMinLinkedShare) {
    why_ = fmt::format(
        "only {:.0f}% of the device's busy time is in ops linked to their launch call, too few "
        "for the step graph to move",
        100 * graph_.linked_share());
  }
}

std::array<double, kNumWaitClasses> StepReplay::graph_idle_ms(double* unlinked_ms) const {
  std::array<double, kNumWaitClasses> out{};
  if (!has_device_) return out;
  const auto by = graph_.attribute_idle(windows_);
  const auto n = static_cast<double>(windows_.size());
  for (int c = 0; c < kNumWaitClasses; ++c) out[c] = static_cast<double>(by.ns[c]) / 1e6 / n;
  if (unlinked_ms) *unlinked_ms = static_cast<double>(by.unlinked_ns) / 1e6 / n;
  return out;
}

double StepReplay::saving_ms(const WhatIf& w) const {
  return std::clamp(base_ms_ - mean_ms(graph_.replay(windows_, w)), 0.0, step_ms_);
}

}  // namespace replay

IdleAttribution compare_idle_attribution(const Trace& trace,
                                         const std::vector<const StepBreakdown*>& steady) {
  IdleAttribution out;
  const replay::StepReplay run(trace, steady);
  if (!run.has_device()) return out;
  out.computed = true;
  out.graph_ms = run.graph_idle_ms(&out.unlinked_ms);
  out.instant_ms = run.instant_idle_ms();
  return out;
}

namespace replay {

void replay_predictions(const StepReplay& run, std::vector<Finding>* findings,
                        const FindingRules& rules) {
  if (findings->empty() || !run.has_device()) return;
  if (!run.usable()) {  // keep the rule's estimates, and say why
    for (Finding& f : *findings)
      if (f.predicted_step_ms >= 0) f.prediction += "; rule estimate: " + run.why();
    return;
  }
  const replay::StepGraph& graph = run.graph();
  const double step = run.step_ms(), idle = run.idle_ms();
  // Each fix alone (what a trial of that fix measures), and, in rank order, what it adds to the
  // fixes ranked above it: those increments add up to all the fixes together, which the graph
  // bounds by the device's idle time, exposed copies and collectives, and faster kernels.
  const std::vector<Fix> all = fixes(rules);
  // The what-ifs in rank order (each finding's fix alone, the fixes so far, the wait fixes so
  // far), re-run on the machine's cores: each re-run reads the graph only.
  std::vector<const Fix*> fix_of(findings->size(), nullptr);
  std::vector<replay::WhatIf> what;
  std::vector<size_t> first(findings->size());  // a finding's what-ifs: 2 or 3 from here
  {
    replay::WhatIf together, together_waits;
    for (size_t i = 0; i < findings->size(); ++i) {
      const Finding& f = (*findings)[i];
      const std::string& remedy = f.remedy.empty() ? f.cls : f.remedy;
      for (const Fix& x : all)
        if (f.share > 0 && remedy == x.cls) fix_of[i] = &x;
      if (!fix_of[i] || !f.predictable || (f.cls == "precision" && !graph.has_simt_gemms())) {
        fix_of[i] = nullptr;
        continue;
      }
      first[i] = what.size();
      what.push_back(fix_of[i]->what);
      merge(&together, fix_of[i]->what);
      what.push_back(together);
      if (f.cls != "precision") {
        merge(&together_waits, fix_of[i]->what);
        what.push_back(together_waits);
      }
    }
  }
  // Equal what-ifs (the first fix alone is also the first "so far") are re-run once.
  std::vector<replay::WhatIf> distinct;
  std::vector<size_t> slot(what.size());
  for (size_t k = 0; k < what.size(); ++k) {
    const auto it = std::find(distinct.begin(), distinct.end(), what[k]);
    slot[k] = static_cast<size_t>(it - distinct.begin());
    if (it == distinct.end()) distinct.push_back(what[k]);
  }
  std::vector<double> ran(distinct.size());
  parallel_for(distinct.size(), [&](size_t k) { ran[k] = run.saving_ms(distinct[k]); });
  std::vector<double> saved(what.size());
  for (size_t k = 0; k < what.size(); ++k) saved[k] = ran[slot[k]];
  double so_far = 0, waits_so_far = 0;
  int ranked = 0;
  for (size_t i = 0; i < findings->size(); ++i) {
    Finding& f = (*findings)[i];
    const Fix* fix = fix_of[i];
    if (!fix) continue;
    const double saving = saved[first[i]];
    const double in_all = saved[first[i] + 1];
    if (f.cls != "precision") waits_so_far = saved[first[i] + 2];
    std::string assumes;
    if (fix->assumes) {
      assumes = fix->assumes;
    } else if (f.cls == "pcie") {
      const std::string rate =
          graph.pinned_rate() > 0
              ? fmt::format("the trace's fastest pinned upload ({:.1f} GB/s)", graph.pinned_rate())
              : fmt::format(
                    "{:.0f}x its pageable rate (assumed: the trace has no pinned upload "
                    "of 1 MiB or more)",
                    rules.pinned_copy_speedup);
      assumes = fmt::format(
          "each pageable or synchronous upload becomes an asynchronous call (a launch's cost) "
          "with no stream sync after it; its copy stays on its stream, before the compute that "
          "reads it, at {}",
          rate);
    } else {
      assumes = fmt::format(
          "the SIMT fp32 GEMM kernels run {:.0f}x faster on the tensor cores, every other op as "
          "traced",
          rules.tensor_core_speedup);
    }
    const std::string rule =
        f.predicted_step_ms >= 0
            ? fmt::format("; the rule estimated {:.2f} ms", step - f.predicted_step_ms)
            : "";
    const std::string above =
        ranked++ == 0 ? ""
                      : fmt::format(
                            "; after the fixes ranked above it {:.2f} ms more, {:.2f} ms "
                            "in all",
                            in_all - so_far, in_all);
    f.predicted_step_ms = std::max(0.0, step - saving);
    f.prediction = fmt::format(
        "step graph re-run ({}, {} device ops, {:.0f}% of their time linked to launches, {} host "
        "pieces): {} (from {:.2f} ms, saving {:.2f} ms{}{})",
        run.steps(), graph.ops(), 100 * graph.linked_share(), graph.pieces(), assumes, step, saving,
        rule, above);
    so_far = in_all;
  }
  // The rules' estimates the graph cannot re-run (a straggler on time): should they and the re-run
  // waits together claim more than the device idles or copies/communicates, the estimates are
  // scaled down to fit.
  double rule_saved = 0;
  std::vector<Finding*> rule_waits;
  for (Finding& f : *findings) {
    if (f.predicted_step_ms < 0 || f.cls == "precision" || f.cls == "batch" ||
        f.prediction.rfind("step graph re-run", 0) == 0)
      continue;
    rule_saved += step - f.predicted_step_ms;
    rule_waits.push_back(&f);
  }
  const double room = std::max(0.0, idle - waits_so_far);
  if (rule_saved > room) {
    const double k = room / rule_saved;
    for (Finding* f : rule_waits) {
      f->predicted_step_ms = step - (step - f->predicted_step_ms) * k;
      f->prediction += fmt::format(
          "; scaled by {:.2f}: with the re-run fixes' {:.2f} ms the estimates would claim more "
          "than the {:.2f} ms the device idles or copies/communicates",
          k, waits_so_far, idle);
    }
  }
}

}  // namespace replay

}  // namespace ft::profiler
