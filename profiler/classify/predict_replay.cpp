// predict_replay.cpp: each finding's predicted step time from a re-run of the rank's step graph
// (step_replay.h) with the finding's cause removed or reduced (findings.h, replay_predictions).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "device_attribution.h"
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
  replay::WhatIf data, memory, sync, pcie, host, precision;
  data.no_data = true;
  memory.no_alloc = true;
  sync.no_readback = true;
  pcie.pinned_copies = true;
  host.graphs = true;
  precision.gemm_speedup = rules.tensor_core_speedup;
  return {
      {"data", data, "the loader's spans take no time (each batch handed over at once)"},
      {"memory", memory,
       "allocator calls take no time and cudaFree no longer drains the device (a warm caching "
       "allocator)"},
      {"sync", sync, "the blocking read-backs and syncs leave the step"},
      {"pcie", pcie,
       "each pageable or synchronous upload becomes an asynchronous call (a launch's cost) whose "
       "copy runs on a side stream at its measured rate"},
      {"host", host,
       "a CUDA-graph replay: no CPU operator, launch, asynchronous copy or untraced host time "
       "between the launches (the loader, the allocator and blocking calls stay); each op starts "
       "1 us after the last on its stream and after what it waits for on another, with no "
       "other delay"},
      {"precision", precision, nullptr},  // assumes: with the speed-up, below
  };
}

constexpr size_t kMaxReplaySteps = 8;    // the first steady steps re-run (bounds time and memory)
constexpr double kMinLinkedShare = 0.5;  // of the device's busy time, in ops linked to a launch

double mean_ms(const std::vector<int64_t>& ns) {
  double sum = 0;
  for (int64_t v : ns) sum += static_cast<double>(v);
  return ns.empty() ? 0 : sum / 1e6 / static_cast<double>(ns.size());
}

}  // namespace

void replay_predictions(const Trace& trace, const std::vector<const StepBreakdown*>& steady,
                        std::vector<Finding>* findings, const FindingRules& rules) {
  if (steady.empty() || findings->empty()) return;
  Track main;
  uint32_t device_pid = 0;
  if (!find_training_track(trace, &main) ||
      !device_attribution::primary_device(trace, main, &device_pid))
    return;
  int64_t t0 = std::numeric_limits<int64_t>::max();
  for (const Event& e : trace.events) t0 = std::min(t0, e.ts_ns);
  // The first steady steps, as the partition cut them (device windows on a GPU trace).
  std::vector<std::pair<int64_t, int64_t>> windows;
  double traced = 0, idle = 0;
  for (size_t i = 0; i < steady.size() && i < kMaxReplaySteps; ++i) {
    const StepBreakdown& s = *steady[i];
    const int64_t lo = t0 + std::llround(s.start_ms * 1e6);
    windows.emplace_back(lo, lo + std::llround(s.wall_ms * 1e6));
    traced += s.wall_ms;
    // What removing waits can save: the device's idle time and its exposed copies and
    // collectives (busy time that moves off the compute's path); not its compute.
    for (const auto& [k, v] : s.detail)
      if (k.rfind("device.idle.", 0) == 0 || k == "device.busy.pcie" || k == "device.busy.comm")
        idle += v;
  }
  const auto n = static_cast<double>(windows.size());
  traced /= n, idle /= n;
  // The graph also holds the step before the first window: its launches may feed that window.
  const int64_t lo = windows.front().first - (windows.front().second - windows.front().first);
  replay::StepGraph graph;
  if (!graph.build(trace, main, device_pid, lo, windows.back().second)) return;
  const double base = mean_ms(graph.replay(windows, {}));
  const std::string steps = windows.size() == 1 ? fmt::format("step {}", steady.front()->step)
                                                : fmt::format("steps {}-{}", steady.front()->step,
                                                              steady[windows.size() - 1]->step);
  std::string why_not;
  if (std::abs(base - traced) > 0.01 * traced) {
    why_not = fmt::format("the step graph re-ran {} in {:.2f} ms against {:.2f} ms traced", steps,
                          base, traced);
  } else if (graph.linked_share() < kMinLinkedShare) {
    why_not = fmt::format(
        "only {:.0f}% of the device's busy time is in ops linked to their launch call, too few "
        "for the step graph to move",
        100 * graph.linked_share());
  }
  if (!why_not.empty()) {  // keep the rule's estimates, and say why
    for (Finding& f : *findings)
      if (f.predicted_step_ms >= 0) f.prediction += "; rule estimate: " + why_not;
    return;
  }
  const double step = [&] {
    double sum = 0;
    for (const StepBreakdown* s : steady) sum += s->wall_ms;
    return sum / static_cast<double>(steady.size());
  }();
  double wait_saved = 0;
  std::vector<std::pair<Finding*, double>> waits;
  for (Finding& f : *findings) {
    if (f.share <= 0) continue;
    for (const Fix& fix : fixes(rules)) {
      if (f.cls != fix.cls) continue;
      if (f.cls == "precision" && !graph.has_simt_gemms()) break;  // not a kernel speed-up
      const double saving = std::clamp(base - mean_ms(graph.replay(windows, fix.what)), 0.0, step);
      const std::string assumes =
          fix.assumes ? fix.assumes
                      : fmt::format(
                            "the SIMT fp32 GEMM kernels run {:.0f}x faster on the tensor "
                            "cores, every other op as traced",
                            rules.tensor_core_speedup);
      const std::string rule =
          f.predicted_step_ms >= 0
              ? fmt::format("; the rule estimated {:.2f} ms", step - f.predicted_step_ms)
              : "";
      f.predicted_step_ms = std::max(0.0, step - saving);
      f.prediction = fmt::format(
          "step graph re-run ({}, {} device ops, {:.0f}% of their time linked to launches, {} "
          "host pieces): {} (from {:.2f} ms, saving {:.2f} ms{})",
          steps, graph.ops(), 100 * graph.linked_share(), graph.pieces(), assumes, step, saving,
          rule);
      break;
    }
  }
  for (Finding& f : *findings) {
    if (f.predicted_step_ms < 0 || f.cls == "precision" || f.cls == "batch") continue;
    const double saving = step - f.predicted_step_ms;
    waits.emplace_back(&f, saving), wait_saved += saving;
  }
  // Removing waits can save at most the device's idle time plus its exposed copies and
  // collectives: should the savings of the findings other than faster kernels (re-runs and the
  // rules' estimates for comm and stragglers) add up to more (each can claim the same stretch),
  // they are scaled down together.
  if (idle > 0 && wait_saved > idle) {
    const double k = idle / wait_saved;
    for (auto& [f, saving] : waits) {
      f->predicted_step_ms = std::max(0.0, step - saving * k);
      f->prediction += fmt::format(
          "; scaled by {:.2f}: the wait findings together saved "
          "{:.2f} ms of {:.2f} ms the device idles or copies/communicates",
          k, wait_saved, idle);
    }
  }
}

}  // namespace ft::profiler
