// steps.cpp: per-step breakdowns in ms with the step's counters (loss, lr, memory) attached.
#include <cmath>
#include <limits>
#include <map>

#include "ft/profiler/classifier.h"

namespace ft::profiler {

std::vector<StepBreakdown> classify_steps(const Trace& trace, const ClassifyOptions& options) {
  const std::vector<StepPartitionNs> parts = partition_steps(trace, options);
  // Counters by name and step (the last sample of a step wins).
  std::map<std::string, std::map<int64_t, double>> counters;
  for (const Event& ev : trace.events) {
    if (ev.phase != Phase::kCounter || ev.step < 0 || ev.name >= trace.names.size()) continue;
    counters[trace.names.at(ev.name)][ev.step] = ev.value;
  }
  auto counter = [&](const char* name, int64_t step) {
    const auto it = counters.find(name);
    if (it == counters.end()) return std::numeric_limits<double>::quiet_NaN();
    const auto jt = it->second.find(step);
    return jt == it->second.end() ? std::numeric_limits<double>::quiet_NaN() : jt->second;
  };
  std::vector<StepBreakdown> out;
  out.reserve(parts.size());
  for (const StepPartitionNs& p : parts) {
    StepBreakdown b;
    b.step = p.step;
    b.start_ms = p.start_ns / 1e6;
    b.wall_ms = p.wall_ns / 1e6;
    for (int i = 0; i < kNumWaitClasses; ++i) b.ms[i] = p.ns[i] / 1e6;
    for (const auto& [k, v] : p.detail_ns) b.detail[k] = v / 1e6;
    if (p.page_faults > 0) b.detail["page_faults.count"] = static_cast<double>(p.page_faults);
    b.loss = counter(kCounterLoss, p.step);
    b.lr = counter(kCounterLr, p.step);
    b.grad_norm = counter(kCounterGradNorm, p.step);
    const double alloc = counter(kCounterMemAllocated, p.step);
    const double reserved = counter(kCounterMemReserved, p.step);
    b.mem_allocated = std::isnan(alloc) ? 0 : alloc;
    b.mem_reserved = std::isnan(reserved) ? 0 : reserved;
    const double tps = counter(kCounterTokensPerS, p.step);
    b.tokens_per_s = std::isnan(tps) ? 0 : tps;
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace ft::profiler
