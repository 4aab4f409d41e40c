// partition.cpp: exact per-step partition of the training thread's wall time, and device idle
// split.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string_view>

#include "device_attribution.h"
#include "event_order.h"
#include "ft/core/error.h"
#include "ft/core/parallel.h"
#include "ft/profiler/classifier.h"
#include "ft/profiler/findings.h"
#include "interval_sweep.h"

namespace ft::profiler {
namespace {
using sweep::Interval;
using sweep::Segment;

// Tie-break priority when two spans start at the same instant with the same length (lower wins).
int class_priority(WaitClass c) {
  switch (c) {
    case WaitClass::kMemory:
      return 0;
    case WaitClass::kSync:
      return 1;
    case WaitClass::kComm:
      return 2;
    case WaitClass::kPcie:
      return 3;
    case WaitClass::kData:
      return 4;
    case WaitClass::kHost:
      return 5;
    case WaitClass::kCompute:
      return 6;
    case WaitClass::kOther:
      return 7;
  }
  return 7;
}

// A host span that is one GEMM: ft's linear layers ("matmul.fwd", "matmul.bwd") and PyTorch's
// CPU GEMM operators. The precision finding takes their time as what bf16 speeds up.
bool is_host_gemm(const std::string& name) {
  static const char* const kAten[] = {"aten::mm",      "aten::addmm",  "aten::bmm",
                                      "aten::baddbmm", "aten::addbmm", "aten::_addmm_activation"};
  if (name.rfind("matmul.", 0) == 0) return true;
  for (const char* a : kAten)
    if (name == a) return true;
  return false;
}

// `cpu_run`: the trace has no device, so the host's compute spans are the compute itself.
const char* detail_key(const Event& ev, const std::string& name, WaitClass cls, bool cpu_run) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  switch (cls) {
    case WaitClass::kData:
      return has("preprocess") ? "data.preprocess" : "data.wait";
    case WaitClass::kPcie:
      if (ev.flags & kPageable) return "pcie.pageable";
      return ev.category == Category::kD2H ? "pcie.d2h" : "pcie.h2d";
    case WaitClass::kComm:
      return has("wait") || has("barrier") || name.rfind(kCommSyncPrefix, 0) == 0 ? "comm.wait"
                                                                                  : "comm.transfer";
    case WaitClass::kMemory:
      if ((ev.flags & kOom) || has("oom")) return "memory.oom";
      if ((ev.flags & kRetry) || has("retry")) return "memory.retry";
      return "memory.allocator";
    case WaitClass::kCompute:
      if (ev.category == Category::kOptimizer) return "compute.optimizer";
      return cpu_run && is_host_gemm(name) ? "compute.gemm" : nullptr;
    case WaitClass::kSync:
      return "sync";
    case WaitClass::kHost:
      return "host";
    case WaitClass::kOther:
      return nullptr;
  }
  return nullptr;
}

double page_fault_cost_ns(const Trace& trace, const ClassifyOptions& options) {
  if (options.page_fault_ns > 0) return options.page_fault_ns;
  const auto it = trace.metadata.find(kMetaPageFaultNs);
  if (it != trace.metadata.end()) {
    char* end = nullptr;
    const double v = std::strtod(it->second.c_str(), &end);
    if (end != it->second.c_str() && std::isfinite(v) && v > 0) return v;
  }
  return ClassifyOptions::kDefaultPageFaultNs;
}

// The cost of a huge-page fault: options, else the trace's metadata; -1 when neither says
// (a trace from before the split, whose page_fault_ns already covers every fault).
double huge_fault_cost_ns(const Trace& trace, const ClassifyOptions& options) {
  if (options.huge_page_fault_ns >= 0) return options.huge_page_fault_ns;
  const auto it = trace.metadata.find(kMetaHugePageFaultNs);
  if (it != trace.metadata.end()) {
    char* end = nullptr;
    const double v = std::strtod(it->second.c_str(), &end);
    if (end != it->second.c_str() && std::isfinite(v) && v >= 0) return v;
  }
  return -1;
}

constexpr int kDeviceCommSync = 101;  // device-split label of "comm sync: ..." collectives

bool is_device_busy(Category c) {
  return c == Category::kCompute || c == Category::kD2D || c == Category::kMemset ||
         c == Category::kOptimizer;
}

// A step's number: the event's step, else its argument, else N of its "ProfilerStep#N" name,
// else its position.
int64_t step_number(const Trace& trace, const Event& st, size_t si) {
  int64_t step = st.step >= 0 ? st.step : st.arg >= 0 ? st.arg : static_cast<int64_t>(si);
  if (st.step < 0 && st.arg < 0) {
    const std::string& n = trace.names.at(st.name);
    if (n.rfind(kProfilerStep, 0) == 0) {
      char* end = nullptr;
      const long long v = std::strtoll(n.c_str() + std::strlen(kProfilerStep), &end, 10);
      if (end != n.c_str() + std::strlen(kProfilerStep) && *end == '\0' && v >= 0) step = v;
    }
  }
  return step;
}

using Windows = std::vector<std::pair<int64_t, int64_t>>;

// The host's step windows: the step spans themselves.
Windows host_windows(const std::vector<const Event*>& outer) {
  Windows w;
  for (const Event* st : outer) w.emplace_back(st->ts_ns, st->end_ns());
  return w;
}

// The device's step windows (device-centric mode): step N runs from the start of its first busy
// device op (launched in step N) to the start of step N+1's first one; the last step ends with
// its last device op or its host span, whichever ends later. A step without device work keeps its
// host window, clipped so that the windows never overlap. So the windows tile the device's work,
// and a host that runs ahead of its queue does not shift device time into the wrong step.
Windows device_windows(const std::vector<const Event*>& outer, const std::vector<int64_t>& numbers,
                       const std::vector<const Event*>& device) {
  std::map<int64_t, std::pair<int64_t, int64_t>> span;  // step -> (first start, last end)
  for (const Event* d : device) {
    if (d->step < 0 || !device_attribution::is_busy(*d)) continue;
    auto [it, fresh] = span.try_emplace(d->step, d->ts_ns, d->end_ns());
    if (!fresh) it->second.second = std::max(it->second.second, d->end_ns());
  }
  Windows w(outer.size());
  for (size_t i = 0; i < outer.size(); ++i) {
    const auto it = span.find(numbers[i]);
    w[i] = it == span.end() ? std::make_pair(outer[i]->ts_ns, outer[i]->end_ns()) : it->second;
  }
  for (size_t i = 0; i + 1 < outer.size(); ++i) {
    if (span.count(numbers[i]) && span.count(numbers[i + 1])) w[i].second = w[i + 1].first;
  }
  // The last step ends when both its device work and its host span have.
  if (!w.empty()) w.back().second = std::max(w.back().second, outer.back()->end_ns());
  for (size_t i = 1; i < outer.size(); ++i) {
    w[i].first = std::max(w[i].first, w[i - 1].second);
    w[i].second = std::max(w[i].second, w[i].first);
  }
  return w;
}

}  // namespace

WaitClass wait_class_of(Category c) {
  switch (c) {
    case Category::kCompute:
    case Category::kOptimizer:
    case Category::kD2D:
    case Category::kMemset:
      return WaitClass::kCompute;
    case Category::kData:
      return WaitClass::kData;
    case Category::kH2D:
    case Category::kD2H:
      return WaitClass::kPcie;
    case Category::kComm:
      return WaitClass::kComm;
    case Category::kAlloc:
      return WaitClass::kMemory;
    case Category::kSync:
      return WaitClass::kSync;
    case Category::kHost:
      return WaitClass::kHost;
    case Category::kStep:
    case Category::kCounter:
    case Category::kOther:
      return WaitClass::kOther;
  }
  return WaitClass::kOther;
}

bool find_training_track(const Trace& trace, Track* out) {
  std::map<Track, std::pair<int64_t, int64_t>> counts;  // (spans, ns)
  for (const Event& ev : trace.events) {
    if (ev.phase != Phase::kSpan || ev.track.device || !is_step_span(trace, ev)) continue;
    auto& c = counts[ev.track];
    ++c.first;
    c.second += ev.dur_ns;
  }
  if (counts.empty()) return false;
  auto best = counts.begin();
  for (auto it = counts.begin(); it != counts.end(); ++it) {
    if (it->second > best->second) best = it;
  }
  *out = best->first;
  return true;
}

namespace {

// What partitioning one step reads.
struct PartitionInput {
  explicit PartitionInput(const Trace& t) : trace(t) {}
  const Trace& trace;
  std::vector<const Event*> spans;           // the training thread's spans, by start
  std::vector<const Event*> faults, system;  // minor-fault and kernel-time counters
  std::map<uint32_t, std::vector<const Event*>> device_by_pid;
  std::vector<const Event*> device;  // the primary device's ops by start (none: host-centric)
  double fault_ns = 0, huge_ns = 0;  // a 4 KiB fault's cost, a huge page's (0: none advised)
};

// A step's host view: the innermost span (owners[label]) at each instant of [lo, hi).
struct HostView {
  std::vector<const Event*> owners;
  std::vector<Segment> host;
  WaitClass class_of(const Segment& s) const {
    return s.label >= 0 ? wait_class_of(owners[s.label]->category) : WaitClass::kOther;
  }
};

// Host spans overlapping the step (from first_span on): innermost (latest start, then shortest)
// wins; their classes and details go into *p.
HostView partition_host(const PartitionInput& in, size_t first_span, int64_t lo, int64_t hi,
                        StepPartitionNs* p) {
  const Trace& trace = in.trace;
  const std::vector<const Event*>& spans = in.spans;
  HostView v;
  std::vector<sweep::SpanInterval> ivs;
  const auto past =
      std::lower_bound(spans.begin() + static_cast<std::ptrdiff_t>(first_span), spans.end(), hi,
                       [](const Event* a, int64_t t) { return a->ts_ns < t; });
  ivs.reserve(static_cast<size_t>(past - spans.begin()) - first_span);
  v.owners.reserve(ivs.capacity());
  for (size_t i = first_span; i < spans.size() && spans[i]->ts_ns < hi; ++i) {
    const Event& ev = *spans[i];
    if (ev.end_ns() <= lo || ev.dur_ns == 0) continue;
    const WaitClass c = wait_class_of(ev.category);
    ivs.push_back({ev.ts_ns, ev.end_ns(), static_cast<int32_t>(v.owners.size()),
                   static_cast<int32_t>(class_priority(c))});
    v.owners.push_back(&ev);
  }
  v.host = sweep::sweep_spans(std::move(ivs), lo, hi);
  // The few detail keys are summed here and added to the step's map once.
  std::vector<std::pair<std::string_view, int64_t>> details;
  for (const Segment& s : v.host) {
    const int64_t len = s.b - s.a;
    WaitClass c = WaitClass::kOther;
    if (s.label >= 0) {
      const Event& ev = *v.owners[s.label];
      c = wait_class_of(ev.category);
      if (const char* key = detail_key(ev, trace.names.at(ev.name), c, in.device.empty())) {
        auto it = std::find_if(details.begin(), details.end(),
                               [&](const auto& d) { return d.first == key; });
        if (it == details.end()) it = details.insert(it, {key, 0});
        it->second += len;
      }
    }
    p->ns[static_cast<int>(c)] += len;
  }
  for (const auto& [key, ns] : details) p->detail_ns[std::string(key)] += ns;
  return v;
}

// First-touch page faults: faults x measured cost, moved out of compute, then other (the stall
// happens inside whatever code touched the page), capped by their sum. Kernel CPU time is kept
// as evidence only: bounding by it under-counted 2-5x (docs/classification.md).
void charge_page_faults(const PartitionInput& in, const std::vector<const Event*>& owners,
                        int64_t lo, int64_t hi, StepPartitionNs* p) {
  for (const Event* f : in.faults) {
    const bool mine = f->step >= 0 ? f->step == p->step : (f->ts_ns >= lo && f->ts_ns <= hi);
    if (mine && f->value > 0) p->page_faults += static_cast<int64_t>(f->value);
  }
  int64_t system_ns = -1;  // kernel CPU time in the step, when recorded
  for (const Event* f : in.system) {
    const bool mine = f->step >= 0 ? f->step == p->step : (f->ts_ns >= lo && f->ts_ns <= hi);
    if (mine) system_ns = std::max<int64_t>(system_ns, 0) + static_cast<int64_t>(f->value);
  }
  if (system_ns >= 0) p->detail_ns["cpu.system"] = system_ns;  // evidence only
  if (p->page_faults <= 0) return;
  // Faults on fresh huge-page-advised segments (at most one per 2 MiB mapped by the step's
  // allocator slow paths) cost a huge page's zeroing; the rest are 4 KiB faults.
  int64_t huge = 0;
  if (in.huge_ns > 0) {
    for (const Event* ev : owners) {
      if (ev->category == Category::kAlloc && (ev->flags & kSlowPath) && ev->bytes > 0) {
        huge += static_cast<int64_t>((ev->bytes + kHugePageBytes - 1) / kHugePageBytes);
      }
    }
    huge = std::min(huge, p->page_faults);
  }
  const double cost = in.huge_ns < 0 ? p->page_faults * in.fault_ns
                                     : huge * in.huge_ns + (p->page_faults - huge) * in.fault_ns;
  const auto want = static_cast<int64_t>(std::llround(cost));
  int64_t& compute = p->ns[static_cast<int>(WaitClass::kCompute)];
  int64_t& other = p->ns[static_cast<int>(WaitClass::kOther)];
  const int64_t take = std::min(want, compute + other);
  const int64_t from_compute = std::min(take, compute);
  compute -= from_compute;
  other -= take - from_compute;
  p->ns[static_cast<int>(WaitClass::kMemory)] += take;
  p->detail_ns["memory.page_faults"] += take;
  if (take < want) p->detail_ns["memory.page_faults_capped"] += want - take;
}

// Device timelines: kernels (and device copies inside the device) are busy; idle time goes to
// device comm, then device PCIe copies, then what the training thread was doing.
void partition_device_timelines(const PartitionInput& in, const HostView& v, int64_t lo, int64_t hi,
                                StepPartitionNs* p) {
  const std::vector<Segment>& host = v.host;
  for (const auto& [pid, evs] : in.device_by_pid) {
    std::vector<Interval> dv;
    for (const Event* d : evs) {
      if (d->end_ns() <= lo || d->ts_ns >= hi) continue;
      int label;
      int64_t prio;
      if (is_device_busy(d->category)) {
        label = 100, prio = 0;
      } else if (d->category == Category::kComm) {
        // Imported collectives split across ranks: "comm sync: ..." waits for late ranks.
        label = in.trace.names.at(d->name).rfind(kCommSyncPrefix, 0) == 0
                    ? kDeviceCommSync
                    : static_cast<int>(WaitClass::kComm);
        prio = 1;
      } else if (d->category == Category::kH2D || d->category == Category::kD2H) {
        label = static_cast<int>(WaitClass::kPcie), prio = 2;
      } else {
        label = static_cast<int>(wait_class_of(d->category)), prio = 3;
      }
      dv.push_back({d->ts_ns, d->end_ns(), label, prio, 0, 0});
    }
    if (dv.empty()) continue;
    // Summed by label (the wait classes, then busy, then comm sync), keyed once.
    constexpr size_t kBusy = kNumWaitClasses, kCommSync = kNumWaitClasses + 1;
    std::array<int64_t, kNumWaitClasses + 2> by_label{};
    std::array<bool, kNumWaitClasses + 2> seen{};
    auto add = [&](int label, int64_t ns) {
      const size_t k = label == 100               ? kBusy
                       : label == kDeviceCommSync ? kCommSync
                       : label < 0                ? 7
                                                  : static_cast<size_t>(label);
      by_label[k] += ns;
      seen[k] = true;
    };
    // Where no device interval covers, the host segment's class does (host compute while the
    // device idles is host-side launch/CPU work): the host segments rank below every device
    // interval, so they are laid under the device's own sweep, not swept with it.
    size_t h = 0;
    for (const Segment& s : sweep::sweep(std::move(dv), lo, hi)) {
      if (s.label >= 0) {
        add(s.label, s.b - s.a);
        continue;
      }
      while (h < host.size() && host[h].b <= s.a) ++h;
      int64_t t = s.a;
      for (size_t j = h; j < host.size() && host[j].a < s.b; ++j) {
        const int64_t a = std::max(host[j].a, s.a), b = std::min(host[j].b, s.b);
        if (a >= b) continue;
        if (a > t) add(-1, a - t);
        const WaitClass c = v.class_of(host[j]);
        add(static_cast<int>(c == WaitClass::kCompute ? WaitClass::kHost : c), b - a);
        t = b;
      }
      if (t < s.b) add(-1, s.b - t);
    }
    const std::string prefix = fmt::format("device{}.", pid);
    for (size_t k = 0; k < by_label.size(); ++k) {
      if (!seen[k]) continue;
      const std::string key = k == kBusy ? prefix + "busy"
                              : k == kCommSync
                                  ? prefix + "idle.comm.sync"
                                  : prefix + "idle." + wait_class_name(static_cast<WaitClass>(k));
      p->detail_ns[key] += by_label[k];
    }
  }
}

// Device-centric mode (issue 19): the step partitioned on the primary device's timeline; the
// training thread's own view stays in the "host.<class>" details.
void split_on_device(const PartitionInput& in, const HostView& v, int64_t lo, int64_t hi,
                     StepPartitionNs* p) {
  const std::vector<const Event*>& owners = v.owners;
  std::vector<device_attribution::HostPiece> pieces;
  pieces.reserve(v.host.size());
  for (const Segment& s : v.host)
    pieces.push_back({s.a, s.b, s.label >= 0 ? owners[s.label] : nullptr});
  for (int c = 0; c < kNumWaitClasses; ++c) {
    if (p->ns[c] > 0)
      p->detail_ns[std::string("host.") + wait_class_name(static_cast<WaitClass>(c))] = p->ns[c];
  }
  // The innermost CPU operator at each instant (what launched the next kernel, or kept the host
  // from it), for the device split's host details.
  std::vector<sweep::SpanInterval> op_ivs;
  for (size_t i = 0; i < owners.size(); ++i) {
    const Event& ev = *owners[i];
    if (ev.category != Category::kCompute && ev.category != Category::kOptimizer) continue;
    op_ivs.push_back({ev.ts_ns, ev.end_ns(), static_cast<int32_t>(i),
                      static_cast<int32_t>(class_priority(wait_class_of(ev.category)))});
  }
  std::vector<device_attribution::HostPiece> operators;
  for (const Segment& s : sweep::sweep_spans(std::move(op_ivs), lo, hi))
    if (s.label >= 0) operators.push_back({s.a, s.b, owners[s.label]});
  device_attribution::partition_step(in.trace, in.device, lo, hi, pieces, owners, operators, p);
}

}  // namespace

std::vector<StepPartitionNs> partition_steps(const Trace& trace, const ClassifyOptions& options) {
  Track main;
  if (!find_training_track(trace, &main)) {
    throw FormatError(fmt::format(
        "trace ({}) has no training steps: no '{}' spans on a host thread",
        trace.source.empty() ? "unnamed" : trace.source, category_name(Category::kStep)));
  }
  // Outermost step spans on the training thread, in time order. The vectors are sized first:
  // on large traces, growth by doubling would hold two copies of the biggest one.
  PartitionInput in(trace);
  std::vector<const Event*> steps;
  std::vector<const Event*>& spans = in.spans;
  std::vector<const Event*>&faults = in.faults, &system = in.system;
  std::map<uint32_t, std::vector<const Event*>>& device_by_pid = in.device_by_pid;
  size_t n_steps = 0, n_spans = 0;
  std::map<uint32_t, size_t> n_device;
  // The device events' pids come in runs: the last one's entry is kept at hand.
  uint32_t last_pid = 0;
  size_t* last_count = nullptr;
  for (const Event& ev : trace.events) {
    if (ev.phase != Phase::kSpan || ev.dur_ns < 0) continue;
    if (ev.track.device) {
      if (last_count == nullptr || ev.track.pid != last_pid) {
        last_pid = ev.track.pid;
        last_count = &n_device[last_pid];
      }
      ++*last_count;
    } else if (ev.track == main) {
      ++(is_step_span(trace, ev) ? n_steps : n_spans);
    }
  }
  steps.reserve(n_steps);
  spans.reserve(n_spans);
  for (const auto& [pid, n] : n_device) device_by_pid[pid].reserve(n);
  std::vector<const Event*>* last_device = nullptr;
  for (const Event& ev : trace.events) {
    if (ev.phase == Phase::kCounter) {
      if (ev.name < trace.names.size()) {
        const std::string& n = trace.names.at(ev.name);
        if (n == kCounterMinorFaults) faults.push_back(&ev);
        if (n == kCounterSystemNs) system.push_back(&ev);
      }
      continue;
    }
    if (ev.phase != Phase::kSpan || ev.dur_ns < 0) continue;
    if (ev.track.device) {
      if (last_device == nullptr || ev.track.pid != last_pid) {
        last_pid = ev.track.pid;
        last_device = &device_by_pid[last_pid];
      }
      last_device->push_back(&ev);
    } else if (ev.track == main) {
      (is_step_span(trace, ev) ? steps : spans).push_back(&ev);
    }
  }
  sort_by_start(&steps);
  std::vector<const Event*> outer;
  for (const Event* s : steps) {
    if (!outer.empty() && s->ts_ns < outer.back()->end_ns()) continue;  // nested or overlapping
    outer.push_back(s);
  }
  sort_by_start(&spans);

  in.fault_ns = page_fault_cost_ns(trace, options);
  // The engine allocator advises fresh segments MADV_HUGEPAGE unless the run said
  // --allocator-huge-pages false: then every fault maps a 4 KiB page.
  in.huge_ns = RunInfo::from_metadata(trace.metadata).allocator_huge_pages
                   ? huge_fault_cost_ns(trace, options)
                   : 0;
  int64_t t0 = std::numeric_limits<int64_t>::max();
  for (const Event& ev : trace.events) t0 = std::min(t0, ev.ts_ns);

  // Device-centric mode (issue 19): with a busy accelerator on the training rank, each step is
  // partitioned on that device's timeline (device_attribution.h); the training thread's own view
  // stays in the "host.<class>" details.
  uint32_t device_pid = 0;
  std::vector<const Event*>& device = in.device;
  if (device_attribution::primary_device(trace, main, &device_pid)) {
    device = device_by_pid[device_pid];
    sort_by_start(&device);
  }

  std::vector<int64_t> numbers(outer.size());
  for (size_t si = 0; si < outer.size(); ++si) numbers[si] = step_number(trace, *outer[si], si);
  const std::vector<std::pair<int64_t, int64_t>> windows =
      device.empty() ? host_windows(outer) : device_windows(outer, numbers, device);

  // Host spans overlapping each step start at or after the step's first span: the spans that
  // end before it (a prefix, as the steps go).
  std::vector<size_t> first_spans(outer.size());
  for (size_t si = 0, first = 0; si < outer.size(); ++si) {
    while (first < spans.size() && spans[first]->end_ns() <= windows[si].first &&
           spans[first]->ts_ns < windows[si].first) {
      ++first;
    }
    first_spans[si] = first;
  }
  // The steps are independent: they are partitioned on the machine's cores.
  std::vector<StepPartitionNs> result(outer.size());
  parallel_for(outer.size(), [&](size_t si) {
    StepPartitionNs& p = result[si];
    p.step = numbers[si];
    const auto [lo, hi] = windows[si];
    p.start_ns = lo - t0;
    p.wall_ns = hi - lo;
    const HostView v = partition_host(in, first_spans[si], lo, hi, &p);
    charge_page_faults(in, v.owners, lo, hi, &p);
    partition_device_timelines(in, v, lo, hi, &p);
    if (!in.device.empty()) split_on_device(in, v, lo, hi, &p);
  });
  return result;
}

}  // namespace ft::profiler
