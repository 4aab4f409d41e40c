// trace_summary.cpp: what ran where per steady step (Diagnosis::trace_summary).
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "device_attribution.h"
#include "event_order.h"
#include "ft/profiler/findings.h"

namespace ft::profiler {
namespace {

constexpr size_t kTop = 10;

std::vector<OpTime> top_of(std::map<std::string, OpTime> by_name, double n) {
  std::vector<OpTime> v;
  for (auto& [name, t] : by_name) {
    t.name = name;
    t.count /= n, t.total_ms /= n, t.self_ms /= n;
    v.push_back(t);
  }
  std::stable_sort(v.begin(), v.end(),
                   [](const OpTime& a, const OpTime& b) { return a.self_ms > b.self_ms; });
  if (v.size() > kTop) v.resize(kTop);
  return v;
}

const char* transfer_kind(const Event& e) {
  switch (e.category) {
    case Category::kH2D:
      return "Memcpy HtoD";
    case Category::kD2H:
      return "Memcpy DtoH";
    case Category::kD2D:
      return "Memcpy DtoD";
    case Category::kMemset:
      return "Memset";
    case Category::kComm:
      return "collective";
    default:
      return nullptr;
  }
}

}  // namespace

TraceSummary summarize_trace(const Trace& trace, const std::vector<const StepBreakdown*>& steady) {
  TraceSummary out;
  Track main;
  uint32_t device = 0;
  if (steady.empty() || !find_training_track(trace, &main) ||
      !device_attribution::primary_device(trace, main, &device))
    return out;
  out.computed = true;
  std::set<int64_t> wanted;
  double wall = 0, busy = 0;
  for (const StepBreakdown* s : steady) {
    wanted.insert(s->step);
    wall += s->wall_ms;
    for (const auto& [k, v] : s->detail)
      if (k.rfind("device.busy.", 0) == 0) busy += v;
  }
  out.device_busy_share = wall > 0 ? busy / wall : 0;
  const auto n = static_cast<double>(steady.size());
  std::map<std::string, OpTime> kernels, ops;
  std::map<uint32_t, std::vector<std::pair<int64_t, int64_t>>> stream_spans;
  std::map<std::string, TransferTime> transfers;
  std::vector<const Event*> host;
  for (const Event& e : trace.events) {
    if (e.phase != Phase::kSpan || !wanted.count(e.step) || e.dur_ns < 0) continue;
    if (e.track.device && e.track.pid == device && device_attribution::is_busy(e)) {
      const std::string& name = trace.names.at(e.name);
      if (name.rfind(kCommSyncPrefix, 0) == 0) continue;  // the wait part of a split collective
      stream_spans[e.track.tid].emplace_back(e.ts_ns, e.end_ns());
      if (const char* kind = transfer_kind(e)) {
        TransferTime& t = transfers[kind];
        t.count += 1, t.ms += static_cast<double>(e.dur_ns) / 1e6;
        t.bytes += static_cast<double>(e.bytes);
      }
      if (e.category == Category::kCompute || e.category == Category::kComm) {
        OpTime& k = kernels[name];
        k.count += 1;
        k.total_ms += static_cast<double>(e.dur_ns) / 1e6;
        k.self_ms = k.total_ms;
      }
    } else if (!e.track.device && e.track == main && !is_step_span(trace, e)) {
      host.push_back(&e);
    }
  }
  // CPU operators: total, and self (less the time of the spans nested in them).
  sort_outer_first(&host);
  std::vector<std::pair<const Event*, int64_t>> stack;  // span, its self time so far
  auto close = [&](const std::pair<const Event*, int64_t>& s) {
    const Event& e = *s.first;
    if (e.category != Category::kCompute && e.category != Category::kOptimizer) return;
    OpTime& o = ops[trace.names.at(e.name)];
    o.count += 1;
    o.total_ms += static_cast<double>(e.dur_ns) / 1e6;
    o.self_ms += static_cast<double>(s.second) / 1e6;
  };
  for (const Event* e : host) {
    while (!stack.empty() && stack.back().first->end_ns() <= e->ts_ns) {
      close(stack.back());
      stack.pop_back();
    }
    if (!stack.empty())
      stack.back().second -= std::min(e->end_ns(), stack.back().first->end_ns()) - e->ts_ns;
    stack.emplace_back(e, e->dur_ns);
  }
  for (auto it = stack.rbegin(); it != stack.rend(); ++it) close(*it);
  out.kernels = top_of(std::move(kernels), n);
  out.cpu_ops = top_of(std::move(ops), n);
  for (auto& [tid, spans] : stream_spans) {
    std::sort(spans.begin(), spans.end());
    int64_t total = 0, cur = INT64_MIN;
    for (const auto& [a, b] : spans) {
      const int64_t from = std::max(a, cur);
      if (b > from) total += b - from;
      cur = std::max(cur, b);
    }
    out.streams.emplace_back("stream " + std::to_string(tid), static_cast<double>(total) / 1e6 / n);
  }
  for (auto& [kind, t] : transfers) {
    t.kind = kind;
    t.count /= n, t.ms /= n, t.bytes /= n;
    out.transfers.push_back(t);
  }
  return out;
}

}  // namespace ft::profiler
