// device_attribution.cpp: device-centric step partition (device_attribution.h).
#include "device_attribution.h"

#include <algorithm>
#include <array>
#include <map>
#include <string>

#include "event_order.h"
#include "interval_sweep.h"

namespace ft::profiler::device_attribution {
namespace {

bool has(const std::string& s, const char* p) { return s.find(p) != std::string::npos; }

constexpr size_t kHostOperatorsPerStep = 3;  // "host_op.<operator>" details kept per step

// Busy labels (WaitClass values) and their overlap priority: compute hides a collective, which
// hides a copy.
int busy_class(const Event& e) {
  if (e.category == Category::kComm) return static_cast<int>(WaitClass::kComm);
  if (e.category == Category::kH2D || e.category == Category::kD2H)
    return static_cast<int>(WaitClass::kPcie);
  return static_cast<int>(WaitClass::kCompute);
}
int busy_priority(int cls) {
  if (cls == static_cast<int>(WaitClass::kCompute)) return 0;
  return cls == static_cast<int>(WaitClass::kComm) ? 1 : 2;
}

}  // namespace

int blocking_class(const Trace& trace, const Event& e) {
  const std::string& n = trace.names.at(e.name);
  switch (e.category) {
    case Category::kSync:
      // A stream's wait on an event and an event query (a poll) return at once.
      return has(n, "StreamWaitEvent") || has(n, "EventQuery") ? -1
                                                               : static_cast<int>(WaitClass::kSync);
    case Category::kD2H:
      return (e.flags & (kPageable | kSynchronous)) || has(n, "cudaMemcpy")
                 ? static_cast<int>(WaitClass::kSync)
                 : -1;
    case Category::kH2D:
      return (e.flags & (kPageable | kSynchronous)) ? static_cast<int>(WaitClass::kPcie) : -1;
    case Category::kAlloc:
      return has(n, "Free") ? static_cast<int>(WaitClass::kMemory) : -1;
    case Category::kComm:
      return static_cast<int>(WaitClass::kComm);
    default:
      return (e.flags & kSynchronous) ? static_cast<int>(WaitClass::kSync) : -1;
  }
}

int idle_class(const Event* e) {
  if (e == nullptr) return static_cast<int>(WaitClass::kHost);  // untraced host code
  switch (e->category) {
    case Category::kData:
      return static_cast<int>(WaitClass::kData);
    case Category::kAlloc:
      return static_cast<int>(WaitClass::kMemory);
    case Category::kH2D:
      return static_cast<int>(WaitClass::kPcie);
    case Category::kD2H:
    case Category::kSync:
      return static_cast<int>(WaitClass::kSync);
    case Category::kComm:
      return static_cast<int>(WaitClass::kComm);
    default:
      return static_cast<int>(WaitClass::kHost);  // CPU ops, launches, annotations
  }
}

bool is_simt_fp32_gemm(const std::string& name) { return has(name, "sgemm") && !has(name, "tf32"); }

namespace {

// "outermost > ... > innermost > call": the host spans enclosing a blocking call (at most the
// outermost one and the two innermost, so that keys stay short).
std::string stack_of(const Trace& trace, const Event& call,
                     const std::vector<const Event*>& host_spans) {
  std::vector<const Event*> enclosing;
  for (const Event* s : host_spans) {
    if (s == &call || is_step_span(trace, *s)) continue;
    if (s->ts_ns <= call.ts_ns && s->end_ns() >= call.end_ns() && s->dur_ns > call.dur_ns)
      enclosing.push_back(s);
  }
  sort_outer_first(&enclosing);  // outermost first
  std::string out;
  for (size_t i = 0; i < enclosing.size(); ++i) {
    if (i > 0 && i + 2 < enclosing.size()) {
      if (i == 1) out += "... > ";
      continue;
    }
    out += trace.names.at(enclosing[i]->name) + " > ";
  }
  return out + trace.names.at(call.name);
}

// The blocking host call in which the host sat when the device ran dry at `t`, or null: the
// latest start (the innermost) of those covering t. `blocking` are the step's blocking calls by
// start, `reach[i]` the latest end among blocking[0..i] (the walk back stops where none reach t).
const Event* blocked_at(int64_t t, const std::vector<const Event*>& blocking,
                        const std::vector<int64_t>& reach) {
  size_t j =
      static_cast<size_t>(std::upper_bound(blocking.begin(), blocking.end(), t,
                                           [](int64_t x, const Event* s) { return x < s->ts_ns; }) -
                          blocking.begin());
  while (j-- > 0 && reach[j] > t) {
    if (blocking[j]->end_ns() > t) return blocking[j];
  }
  return nullptr;
}

// The step's details under fixed keys, summed per piece and added to its map once.
struct Tally {
  int64_t ns = 0;
  bool seen = false;
  void add(int64_t x) {
    ns += x;
    seen = true;
  }
};
struct StepTallies {
  std::array<Tally, kNumWaitClasses> idle, busy;
  Tally cpu_work, drained, refill;
  void add_to(StepPartitionNs* p) const {
    for (int c = 0; c < kNumWaitClasses; ++c) {
      const char* name = wait_class_name(static_cast<WaitClass>(c));
      if (idle[c].seen) p->detail_ns[std::string("device.idle.") + name] += idle[c].ns;
      if (busy[c].seen) p->detail_ns[std::string("device.busy.") + name] += busy[c].ns;
    }
    if (cpu_work.seen) p->detail_ns["host.cpu_work"] += cpu_work.ns;
    if (drained.seen) p->detail_ns["device.drained"] += drained.ns;
    if (refill.seen) p->detail_ns["sync.refill"] += refill.ns;
  }
};

void charge_part(int cls, int64_t ns, StepPartitionNs* p, StepTallies* t) {
  if (ns <= 0) return;
  p->ns[cls] += ns;
  t->idle[cls].add(ns);
}

}  // namespace

bool is_cpu_work(const Event* e) {
  return e != nullptr && !e->track.device && (e->flags & kCpuWork) &&
         (e->category == Category::kCompute || e->category == Category::kOptimizer);
}

bool is_cpu_work_gap(const std::vector<HostPiece>& pieces, size_t k) {
  return pieces[k].ev == nullptr && k > 0 && k + 1 < pieces.size() &&
         is_cpu_work(pieces[k - 1].ev) && is_cpu_work(pieces[k + 1].ev);
}

bool is_busy(const Event& e) {
  if (!e.track.device || e.phase != Phase::kSpan || e.dur_ns <= 0 || (e.flags & kNoStream))
    return false;
  switch (e.category) {
    case Category::kCompute:
    case Category::kOptimizer:
    case Category::kD2D:
    case Category::kMemset:
    case Category::kComm:
    case Category::kH2D:
    case Category::kD2H:
      return true;
    default:
      return false;
  }
}

bool primary_device(const Trace& trace, const Track& main, uint32_t* device_pid) {
  const bool merged = trace.metadata.count("ranks") > 0;  // Kineto ranks, merged
  std::map<uint32_t, int64_t> busy;
  for (const Event& e : trace.events) {
    if (!is_busy(e)) continue;
    if (merged && e.track.pid / 256u != main.pid >> 24) continue;
    busy[e.track.pid] += e.dur_ns;
  }
  if (busy.empty()) return false;
  auto best = busy.begin();
  for (auto it = busy.begin(); it != busy.end(); ++it) {
    if (it->second > best->second) best = it;
  }
  *device_pid = best->first;
  return true;
}

void partition_step(const Trace& trace, const std::vector<const Event*>& device, int64_t lo,
                    int64_t hi, const std::vector<HostPiece>& host,
                    const std::vector<const Event*>& host_spans,
                    const std::vector<HostPiece>& operators, StepPartitionNs* p) {
  std::vector<sweep::Interval> ivs;
  for (const Event* d : device) {
    if (d->ts_ns >= hi) break;
    if (d->end_ns() <= lo || !is_busy(*d)) continue;
    const int c = busy_class(*d);
    ivs.push_back({d->ts_ns, d->end_ns(), c, busy_priority(c), 0, 0});
  }
  std::vector<const Event*> blocking;
  for (const Event* s : host_spans) {
    if (blocking_class(trace, *s) >= 0) blocking.push_back(s);
  }
  sort_by_start(&blocking);
  std::vector<int64_t> reach(blocking.size());
  for (size_t i = 0; i < blocking.size(); ++i)
    reach[i] = std::max(i > 0 ? reach[i - 1] : blocking[i]->end_ns(), blocking[i]->end_ns());
  p->ns.fill(0);
  StepTallies tally;
  std::map<uint32_t, int64_t> host_by_op;  // idle charged to the host, by the CPU operator
  size_t op = 0;                           // first operator piece that may overlap it
  bool cpu_gap = false;  // charging an untraced stretch between two CPU-work operators
  auto charge_host = [&](int64_t a, int64_t b) {
    charge_part(static_cast<int>(WaitClass::kHost), b - a, p, &tally);
    if (cpu_gap) tally.cpu_work.add(b - a);
    while (op < operators.size() && operators[op].b <= a) ++op;
    for (size_t k = op; k < operators.size() && operators[k].a < b; ++k) {
      const Event* ev = operators[k].ev;
      if (ev == nullptr) continue;
      const int64_t ns = std::min(b, operators[k].b) - std::max(a, operators[k].a);
      host_by_op[ev->name] += ns;
      // The program's own CPU work (an operator that launches nothing), not dispatch.
      if (is_cpu_work(ev)) tally.cpu_work.add(ns);
    }
  };
  size_t h = 0;  // first host piece that may overlap the current idle stretch
  for (const sweep::Segment& s : sweep::sweep(std::move(ivs), lo, hi)) {
    const int64_t len = s.b - s.a;
    if (s.label >= 0) {
      p->ns[s.label] += len;
      tally.busy[s.label].add(len);
      continue;
    }
    // Idle: did a blocking call drain the queue? Until it returns, the stretch is that call's.
    // After a sync (a read-back), the host's refill (CPU ops, launches, untraced code) is too,
    // up to the call's own length: without the call the host would have been that much further
    // ahead, and no more. Loader, allocator and copy time keep their classes.
    const Event* blocker = blocked_at(s.a, blocking, reach);
    const int drain = blocker ? blocking_class(trace, *blocker) : -1;
    int64_t refill = drain == static_cast<int>(WaitClass::kSync) ? blocker->dur_ns : 0;
    if (blocker) tally.drained.add(len);
    std::string by;  // "sync.by.<stack>", made once per drained stretch
    auto by_key = [&]() -> const std::string& {
      if (by.empty()) by = "sync.by." + stack_of(trace, *blocker, host_spans);
      return by;
    };
    auto charge = [&](int64_t a, int64_t b, int c) {
      if (drain >= 0 && a < blocker->end_ns()) {  // the part while the call still blocks
        const int64_t m = std::min(b, blocker->end_ns());
        charge_part(drain, m - a, p, &tally);
        if (drain == static_cast<int>(WaitClass::kSync)) p->detail_ns[by_key()] += m - a;
        a = m;
      }
      if (a < b && c == static_cast<int>(WaitClass::kHost) && refill > 0) {
        const int64_t m = std::min(b, a + refill);
        refill -= m - a;
        charge_part(drain, m - a, p, &tally);
        p->detail_ns[by_key()] += m - a;
        tally.refill.add(m - a);
        a = m;
      }
      if (a >= b) return;
      if (c == static_cast<int>(WaitClass::kHost)) {
        charge_host(a, b);
      } else {
        charge_part(c, b - a, p, &tally);
      }
    };
    while (h < host.size() && host[h].b <= s.a) ++h;
    int64_t t = s.a;
    for (size_t k = h; k < host.size() && host[k].a < s.b; ++k) {
      const int64_t a = std::max(host[k].a, s.a), b = std::min(host[k].b, s.b);
      if (a >= b) continue;
      cpu_gap = is_cpu_work_gap(host, k);
      charge(a, b, idle_class(host[k].ev));
      cpu_gap = false;
      t = b;
    }
    if (t < s.b) charge(t, s.b, static_cast<int>(WaitClass::kHost));  // past the last piece
  }
  tally.add_to(p);
  // The CPU operators the device waited on most ("host_op.<operator>", the step's top three).
  std::vector<std::pair<int64_t, uint32_t>> top;
  for (const auto& [name, ns] : host_by_op) top.emplace_back(ns, name);
  std::sort(top.rbegin(), top.rend());
  for (size_t k = 0; k < top.size() && k < kHostOperatorsPerStep; ++k)
    p->detail_ns["host_op." + trace.names.at(top[k].second)] += top[k].first;
}

}  // namespace ft::profiler::device_attribution
