// step_replay.cpp: the training rank's dependency graph, re-run under a what-if (step_replay.h).
#include "step_replay.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <string>

#include "device_attribution.h"
#include "ft/profiler/classifier.h"
#include "interval_sweep.h"

namespace ft::profiler::replay {
namespace {

constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();
constexpr int64_t kDefaultLaunchNs = 5000;  // when the trace links no launch to its op
// An op that starts this soon (or within the launch latency) after an op on another stream ends,
// later than its launch and stream allow, waits for that op (cudaStreamWaitEvent).
constexpr int64_t kCrossStreamLagNs = 20000;
constexpr double kLatencyQuantile = 0.25;
// Untraced host time up to this long between captured calls is the interpreter's dispatch glue.
constexpr int64_t kGraphGlueNs = 50000;
// A launch call over kQueueFullMinNs (a launch takes a few µs) that returns within
// kCrossStreamLagNs of an op's end was waiting for a slot in the launch queue.
constexpr int64_t kQueueFullMinNs = 100000;
// Pinned host-to-device copies at least this large give the trace's pinned-copy rate.
constexpr uint64_t kRateMinBytes = 1 << 20;

// The q-quantile of v (nearest rank), or `fallback` when v is empty.
int64_t quantile(std::vector<int64_t> v, double q, int64_t fallback) {
  if (v.empty()) return fallback;
  const auto at = v.begin() + static_cast<std::ptrdiff_t>(q * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), at, v.end());
  return *at;
}

constexpr uint8_t cls(WaitClass c) { return static_cast<uint8_t>(c); }

// Correlation id -> the first value added for it, as a sorted vector: 16-24 bytes an id, where a
// hash map's nodes and buckets take three times that.
template <class T>
class IdIndex {
 public:
  void reserve(size_t n) { items_.reserve(n); }
  void add(uint64_t id, const T& v) { items_.push_back({id, v}); }
  void seal() {  // before find; the first of each id stays
    std::stable_sort(items_.begin(), items_.end(),
                     [](const Item& x, const Item& y) { return x.id < y.id; });
    items_.erase(std::unique(items_.begin(), items_.end(),
                             [](const Item& x, const Item& y) { return x.id == y.id; }),
                 items_.end());
  }
  const T* find(uint64_t id) const {
    const auto it = std::lower_bound(items_.begin(), items_.end(), id,
                                     [](const Item& x, uint64_t v) { return x.id < v; });
    return it != items_.end() && it->id == id ? &it->v : nullptr;
  }

 private:
  struct Item {
    uint64_t id;
    T v;
  };
  std::vector<Item> items_;
};

// Whether a CUDA graph (or torch.compile's reduce-overhead) would capture a host piece: runtime
// calls (launches, asynchronous copies, collective launches), framework operators, and short
// untraced glue between them (the interpreter's dispatch); not the user's Python (python
// frames, annotations' own time, long untraced stretches), CPU work (kCpuWork operators), the
// loader, the allocator, or a call that blocks.
// Per name: is it user Python (a python frame or a built-in)? Memoised for the graph's build.
class PythonNames {
 public:
  explicit PythonNames(const Trace& trace) : trace_(trace), memo_(trace.names.size(), -1) {}
  bool operator()(uint32_t name) {
    if (name >= memo_.size()) return is_python(trace_.names.at(name));
    if (memo_[name] < 0) memo_[name] = is_python(trace_.names.at(name)) ? 1 : 0;
    return memo_[name] == 1;
  }

 private:
  static bool is_python(const std::string& n) {
    return n.find(".py(") != std::string::npos || n.rfind("<built-in", 0) == 0;
  }
  const Trace& trace_;
  std::vector<int8_t> memo_;
};

bool captured(const Trace& trace, const Event* ev, int64_t len, PythonNames& python) {
  if (ev == nullptr) return len <= kGraphGlueNs;
  switch (ev->category) {
    case Category::kHost:
    case Category::kH2D:
    case Category::kD2H:
    case Category::kD2D:
    case Category::kMemset:
    case Category::kComm:
      return device_attribution::blocking_class(trace, *ev) < 0;
    case Category::kCompute:
    case Category::kOptimizer:
      // CPU work (tensor math on CPU tensors) is not device work: a graph cannot replay it.
      return !python(ev->name) && !device_attribution::is_cpu_work(ev);
    default:
      return false;
  }
}

}  // namespace

struct StepGraph::State {
  std::vector<int64_t> start, end;        // pieces (kUnset until known)
  std::vector<int64_t> op_start, op_end;  // ops
  int64_t main_shift = 0;                 // replayed - traced time at the last training piece
};

bool StepGraph::build(const Trace& trace, const Track& main, uint32_t device_pid, int64_t lo,
                      int64_t hi) {
  pieces_.clear(), ops_.clear(), order_.clear(), ops_by_end_.clear();
  // Device ops: the busy spans of the device, by start.
  std::vector<const Event*> dev;
  for (const Event& e : trace.events)
    if (e.track.device && e.track.pid == device_pid && device_attribution::is_busy(e) &&
        e.end_ns() > lo && e.ts_ns <= hi)
      dev.push_back(&e);
  if (dev.empty()) return false;
  std::sort(dev.begin(), dev.end(), [](const Event* a, const Event* b) {
    return a->ts_ns != b->ts_ns ? a->ts_ns < b->ts_ns : a->end_ns() < b->end_ns();
  });
  IdIndex<int32_t> op_of;  // correlation id -> op
  op_of.reserve(dev.size());
  for (size_t i = 0; i < dev.size(); ++i)
    if (dev[i]->id != 0) op_of.add(dev[i]->id, static_cast<int32_t>(i));
  op_of.seal();
  ops_by_end_.resize(dev.size());
  for (size_t i = 0; i < dev.size(); ++i) ops_by_end_[i] = static_cast<int32_t>(i);
  std::sort(ops_by_end_.begin(), ops_by_end_.end(),
            [&](int32_t a, int32_t b) { return dev[a]->end_ns() < dev[b]->end_ns(); });

  // Host threads of the training process: the training thread, and those that launch on the
  // device (PyTorch's autograd device thread runs the backward's launches).
  std::map<uint32_t, std::vector<const Event*>> by_tid;
  std::map<uint32_t, bool> launches;
  std::vector<int64_t> launch_costs;
  for (const Event& e : trace.events) {
    if (e.track.device || e.track.pid != main.pid || e.phase != Phase::kSpan || e.dur_ns <= 0 ||
        e.end_ns() <= lo || e.ts_ns >= hi || is_step_span(trace, e))
      continue;
    by_tid[e.track.tid].push_back(&e);
    if (e.id != 0 && op_of.find(e.id)) {
      launches[e.track.tid] = true;
      if (e.category == Category::kHost) launch_costs.push_back(e.dur_ns);
    }
  }
  std::vector<uint32_t> tids = {main.tid};
  pid_ = main.pid;
  for (const auto& [tid, l] : launches)
    if (tid != main.tid && tids.size() < kMaxThreads) tids.push_back(tid);  // others: unlinked

  launch_cost_ns_ = quantile(launch_costs, 0.5, kDefaultLaunchNs);
  // A launch or asynchronous copy call over 100 µs that returns right after an op ends waited for
  // a slot in a full launch queue: it blocks on that op.
  const int64_t dev_lo = dev.front()->ts_ns, dev_hi = dev[ops_by_end_.back()]->end_ns();
  struct Launch {
    int32_t thread;
    int64_t ts, dur;
  };
  IdIndex<Launch> launch_of;      // correlation id -> launch call
  launch_of.reserve(dev.size());  // one launch per op, as a rule
  PythonNames python(trace);
  std::vector<std::pair<size_t, size_t>>& thread_range = thread_range_;
  thread_range.clear();
  for (size_t t = 0; t < tids.size(); ++t) {
    std::vector<const Event*>& spans = by_tid[tids[t]];
    int64_t from = t == 0 ? std::min(lo, dev_lo) : std::numeric_limits<int64_t>::max();
    int64_t to = t == 0 ? std::max(hi, dev_hi) : std::numeric_limits<int64_t>::min();
    std::vector<sweep::SpanInterval> ivs;
    ivs.reserve(spans.size());
    for (size_t k = 0; k < spans.size(); ++k) {
      const Event& e = *spans[k];
      from = std::min(from, e.ts_ns), to = std::max(to, e.end_ns());
      ivs.push_back({e.ts_ns, e.end_ns(), static_cast<int32_t>(k), 0});
      if (e.id != 0 && op_of.find(e.id)) {
        launch_of.add(e.id, Launch{static_cast<int32_t>(t), e.ts_ns, e.dur_ns});
      }
    }
    const size_t first = pieces_.size();
    bool after_gap = true;
    // At most 2n + 1 segments, taken as they come (not held): reserved, not grown by doubling.
    pieces_.reserve(pieces_.size() + 2 * ivs.size() + 1);
    sweep::sweep_spans_each(std::move(ivs), from, to, [&](const sweep::Segment& s) {
      const Event* ev = s.label >= 0 ? spans[s.label] : nullptr;
      if (ev == nullptr && t != 0) {  // another thread's untraced time: it waits
        after_gap = true;
        return;
      }
      Piece p;
      p.a = s.a, p.b = s.b;
      p.thread = static_cast<uint16_t>(t);
      p.cls = static_cast<uint8_t>(device_attribution::idle_class(ev));
      p.untraced = ev == nullptr;
      p.burst_first = after_gap;
      after_gap = false;
      p.captured = captured(trace, ev, s.b - s.a, python);
      p.cpu_work = device_attribution::is_cpu_work(ev);
      int bc = ev ? device_attribution::blocking_class(trace, *ev) : -1;
      const int32_t* own_op = ev && ev->id != 0 ? op_of.find(ev->id) : nullptr;
      const bool linked = own_op != nullptr;
      bool queue_full = false;
      if (bc < 0 && linked && ev->dur_ns > kQueueFullMinNs) {
        bc = static_cast<int>(WaitClass::kHost);
        queue_full = true;
      }
      if (bc >= 0 && bc != static_cast<int>(WaitClass::kComm) && s.b == ev->end_ns()) {
        // The op the call waited for: its own copy, else the last op to end before it returned.
        int32_t w = -1;
        if (linked && !queue_full) {
          w = *own_op;
        } else {
          const auto past =
              std::upper_bound(ops_by_end_.begin(), ops_by_end_.end(), ev->end_ns(),
                               [&](int64_t v, int32_t o) { return v < dev[o]->end_ns(); });
          if (past != ops_by_end_.begin()) w = *(past - 1);
        }
        // A pageable upload returns once its last chunk is staged, a few µs before that chunk's
        // DMA ends (seen on an H200: 12-15 µs): its own copy may end that much after it.
        const int64_t slack = linked && !queue_full ? kCrossStreamLagNs : 0;
        if (w >= 0 && dev[w]->end_ns() >= ev->ts_ns && dev[w]->end_ns() <= ev->end_ns() + slack &&
            (!queue_full || ev->end_ns() - dev[w]->end_ns() <= kCrossStreamLagNs)) {
          p.block = static_cast<uint8_t>(bc + 1);
          p.wait_op = w;
          p.ret = std::max<int64_t>(0, ev->end_ns() - dev[w]->end_ns());
        }
      }
      pieces_.push_back(p);
    });
    // Untraced time between two CPU-work operators is that work too (partition's rule).
    for (size_t j = first + 1; j + 1 < pieces_.size(); ++j) {
      const Piece &before = pieces_[j - 1], &after = pieces_[j + 1];
      if (pieces_[j].untraced && before.cpu_work && after.cpu_work && !before.untraced &&
          !after.untraced) {
        pieces_[j].cpu_work = true;
        pieces_[j].captured = false;
      }
    }
    thread_range.emplace_back(first, pieces_.size());
  }
  launch_of.seal();
  tids_ = tids;
  marked_.clear();

  // Ops: anchor (the piece its launch starts in), stream predecessor, latency and delay.
  ops_.resize(dev.size());
  std::map<uint32_t, int32_t> last_on_stream;
  std::map<int64_t, int32_t> first_of_step;
  std::vector<int64_t> free_latency;  // launch -> start of ops whose stream was empty
  std::vector<int8_t> simt_memo;      // name -> is a SIMT fp32 GEMM (-1: not looked at)
  for (size_t i = 0; i < dev.size(); ++i) {
    const Event& e = *dev[i];
    Op& o = ops_[i];
    o.ts = e.ts_ns, o.dur = e.dur_ns;
    o.collective = e.category == Category::kComm;
    o.rank_wait = o.collective && trace.names.at(e.name).rfind(kCommSyncPrefix, 0) == 0;
    if (e.step >= 0) {
      const auto [it, fresh] = first_of_step.try_emplace(e.step, static_cast<int32_t>(i));
      o.step_first = it->second;
    }
    if (e.category == Category::kCompute) {
      if (e.name >= simt_memo.size()) simt_memo.resize(e.name + 1, -1);
      if (simt_memo[e.name] < 0)
        simt_memo[e.name] = device_attribution::is_simt_fp32_gemm(trace.names.at(e.name)) ? 1 : 0;
      o.simt_gemm = simt_memo[e.name] == 1;
    }
    simt_gemms_ |= o.simt_gemm;
    o.pageable_upload = e.category == Category::kH2D && (e.flags & (kPageable | kSynchronous));
    if (const auto it = last_on_stream.find(e.track.tid); it != last_on_stream.end())
      o.prev = it->second;
    last_on_stream[e.track.tid] = static_cast<int32_t>(i);
    o.bytes = e.bytes;
    if (e.category == Category::kH2D && (e.flags & kPinned) && e.bytes >= kRateMinBytes &&
        e.dur_ns > 0)
      pinned_rate_ = std::max(pinned_rate_, static_cast<double>(e.bytes) / e.dur_ns);
    if (const Launch* l = e.id != 0 ? launch_of.find(e.id) : nullptr) {
      const auto [first, past] = thread_range[l->thread];
      const auto pos = std::upper_bound(pieces_.begin() + static_cast<std::ptrdiff_t>(first),
                                        pieces_.begin() + static_cast<std::ptrdiff_t>(past), l->ts,
                                        [](int64_t v, const Piece& p) { return v < p.a; });
      if (pos != pieces_.begin() + static_cast<std::ptrdiff_t>(first)) {
        o.anchor = static_cast<int32_t>(pos - pieces_.begin() - 1);
        o.anchor_off = l->ts - pieces_[o.anchor].a;
        o.launch_dur = l->dur;
        if (o.prev < 0 || dev[o.prev]->end_ns() <= l->ts) free_latency.push_back(e.ts_ns - l->ts);
      }
    }
  }
  // The launch latency: a low quantile of launch -> start over ops whose stream was empty at
  // their launch (the median would count the ops that wait for another stream).
  latency_ns_ = quantile(free_latency, kLatencyQuantile, kDefaultLaunchNs);
  int64_t busy = 0;
  int64_t linked = 0;
  for (const Op& o : ops_) {
    busy += o.dur;
    if (o.anchor >= 0) linked += o.dur;
  }
  linked_share_ = busy > 0 ? static_cast<double>(linked) / static_cast<double>(busy) : 0;
  // By end: the last op before each that ran on another stream (-1: none), so that finding the
  // op on another stream that ended last before an instant is one step, not a walk back over
  // the stream's own ops.
  std::vector<int64_t> other_stream_before(ops_by_end_.size(), -1);
  for (size_t j = 1; j < ops_by_end_.size(); ++j) {
    other_stream_before[j] =
        dev[ops_by_end_[j - 1]]->track.tid != dev[ops_by_end_[j]]->track.tid
            ? static_cast<int64_t>(j - 1)
            : other_stream_before[j - 1];
  }
  for (size_t i = 0; i < ops_.size(); ++i) {
    Op& o = ops_[i];
    const int64_t p_end = o.prev >= 0 ? dev[o.prev]->end_ns() : kUnset;
    if (o.anchor >= 0) {
      const int64_t a = pieces_[o.anchor].a + o.anchor_off;
      o.delta = std::min(o.ts - a, latency_ns_);
      o.gap = std::max<int64_t>(0, o.ts - std::max(a + o.delta, p_end));
    } else if (o.prev >= 0) {
      o.gap = std::max<int64_t>(0, o.ts - p_end);
    }
    if (o.gap > 0) {
      // Started later than its launch and its stream allow: a wait on another stream (an event
      // recorded after a collective or copy there). The op on another stream that ended last
      // before it, if just before, is that dependency.
      const auto past =
          std::upper_bound(ops_by_end_.begin(), ops_by_end_.end(), o.ts,
                           [&](int64_t v, int32_t k) { return v < dev[k]->end_ns(); });
      auto j = static_cast<int64_t>(past - ops_by_end_.begin()) - 1;
      if (j >= 0 && dev[ops_by_end_[j]]->track.tid == dev[i]->track.tid) j = other_stream_before[j];
      if (j >= 0) {
        const int32_t k = ops_by_end_[j];
        const int64_t lag = o.ts - dev[k]->end_ns();
        if (lag <= std::max(latency_ns_, kCrossStreamLagNs)) {
          o.dep = k, o.dep_lag = lag, o.gap = 0;
        }
      }
    }
  }
  // Processing order: pieces at their end, ops at their start (a piece first on a tie: an op
  // may be launched from the piece that starts there).
  // Each thread's pieces and the ops come in that order already: the runs are merged (a
  // stable sort where one is not).
  order_.reserve(pieces_.size() + ops_.size());
  for (size_t i = 0; i < pieces_.size(); ++i) order_.push_back(static_cast<int32_t>(i));
  for (size_t i = 0; i < ops_.size(); ++i) order_.push_back(-1 - static_cast<int32_t>(i));
  auto key = [&](int32_t item) { return item >= 0 ? pieces_[item].b : ops_[-1 - item].ts; };
  auto by_key = [&](int32_t x, int32_t y) { return key(x) < key(y); };
  std::vector<size_t> runs;  // run starts in order_: each thread's pieces, then the ops
  for (const auto& [first, past] : thread_range_) runs.push_back(first);
  runs.push_back(pieces_.size());
  runs.push_back(order_.size());
  bool sorted_runs = true;
  for (size_t r = 0; r + 1 < runs.size(); ++r)
    sorted_runs = sorted_runs &&
                  std::is_sorted(order_.begin() + static_cast<std::ptrdiff_t>(runs[r]),
                                 order_.begin() + static_cast<std::ptrdiff_t>(runs[r + 1]), by_key);
  if (!sorted_runs) {
    std::stable_sort(order_.begin(), order_.end(), [&](int32_t x, int32_t y) {
      const int64_t kx = key(x), ky = key(y);
      if (kx != ky) return kx < ky;
      return (x < 0) < (y < 0);
    });
    return true;
  }
  // Merged left to right: on a tie the earlier run (a lower thread, pieces before ops) first.
  for (size_t r = 1; r + 1 < runs.size(); ++r) {
    std::inplace_merge(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(runs[r]),
                       order_.begin() + static_cast<std::ptrdiff_t>(runs[r + 1]), by_key);
  }
  return true;
}

size_t StepGraph::mark_spans(const Trace& trace, const std::string& name) {
  marked_.assign(pieces_.size(), false);
  std::map<uint32_t, std::vector<std::pair<int64_t, int64_t>>> spans;  // tid -> spans named so
  for (const Event& e : trace.events) {
    if (e.track.device || e.track.pid != pid_ || e.phase != Phase::kSpan || e.dur_ns <= 0 ||
        trace.names.at(e.name) != name)
      continue;
    spans[e.track.tid].emplace_back(e.ts_ns, e.end_ns());
  }
  size_t n = 0;
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const auto it = spans.find(tids_[pieces_[i].thread]);
    if (it == spans.end()) continue;
    for (const auto& [a, b] : it->second) {
      if (pieces_[i].a >= a && pieces_[i].b <= b) {
        marked_[i] = true;
        ++n;
        break;
      }
    }
  }
  return n;
}

int64_t StepGraph::start_of(State& s, int32_t i) const {
  if (s.start[i] != kUnset) return s.start[i];
  const Piece& p = pieces_[i];
  int64_t v;
  if (p.thread != 0) {
    v = p.burst_first ? main_at(s, p.a) : s.end[i - 1];
    if (v == kUnset) v = p.a + s.main_shift;
  } else if (static_cast<size_t>(i) == thread_range_[0].first) {
    v = p.a;
  } else {
    v = s.end[i - 1] != kUnset ? s.end[i - 1] : p.a + s.main_shift;
  }
  s.start[i] = v;
  return v;
}

// Where the training thread is at traced time `t`, in replayed time.
int64_t StepGraph::main_at(State& s, int64_t t) const {
  // The training thread's pieces: pieces_[thread_range_[0]], by start.
  const auto first = pieces_.begin() + static_cast<std::ptrdiff_t>(thread_range_[0].first);
  const auto past = pieces_.begin() + static_cast<std::ptrdiff_t>(thread_range_[0].second);
  const auto pos =
      std::upper_bound(first, past, t, [](int64_t v, const Piece& p) { return v < p.a; });
  if (pos == first) return t;
  const auto j = static_cast<int32_t>(pos - 1 - pieces_.begin());
  const Piece& p = pieces_[j];
  const int64_t st = start_of(s, j);
  if (s.end[j] == kUnset) return st + (t - p.a);
  if (t >= p.b) return s.end[j] + (t - p.b);
  return std::min(st + (t - p.a), s.end[j]);
}

void StepGraph::replay_piece(State& s, int32_t i, const WhatIf& w) const {
  const Piece& p = pieces_[i];
  const int64_t st = start_of(s, i);
  const int64_t own = p.b - p.a;
  int64_t end = st + own;
  if (p.block != 0) {
    const auto bc = static_cast<uint8_t>(p.block - 1);
    if (bc == cls(WaitClass::kSync) && w.no_readback) {
      end = st;
    } else if (bc == cls(WaitClass::kPcie) && w.pinned_copies) {
      end = st + std::min(own, launch_cost_ns_);
    } else if (bc == cls(WaitClass::kSync) && w.pinned_copies && p.wait_op >= 0 &&
               ops_[p.wait_op].pageable_upload) {
      // The stream sync a blocking upload adds (PyTorch's copy_ from pageable memory without
      // non_blocking): a non_blocking copy from pinned memory has none.
      end = st;
    } else if (bc == cls(WaitClass::kMemory) && w.no_alloc) {
      end = st;
    } else if (s.op_end[p.wait_op] != kUnset) {
      end = std::max(st + std::min(own, p.ret), s.op_end[p.wait_op] + p.ret);
    }
  } else if ((w.remove_marked && !marked_.empty() && marked_[i]) ||
             (p.cls == cls(WaitClass::kData) && w.no_data) ||
             (p.cls == cls(WaitClass::kMemory) && w.no_alloc) || (w.graphs && p.captured) ||
             (w.no_cpu_work && p.cpu_work)) {
    end = st;
  }
  s.end[i] = end;
  if (p.thread == 0) s.main_shift = end - p.b;
}

void StepGraph::replay_op(State& s, int32_t i, const WhatIf& w) const {
  const Op& o = ops_[i];
  const int32_t prev = o.prev;
  const int64_t p_end = prev >= 0 ? s.op_end[prev] + (w.graphs ? kGraphNodeGapNs : 0)
                                  : std::numeric_limits<int64_t>::min();
  // A graph replays the captured work back to back: delays the trace does not explain (a slow
  // launch, a wait on something untraced) go with the launches.
  const int64_t gap = w.graphs ? 0 : o.gap;
  if (w.overlap_comm && o.collective && o.step_first >= 0 && o.step_first != i) {
    // Bucketed: the collective runs beside the step's compute from the step's first op on; the
    // ops that wait for it still do (their cross-stream wait).
    s.op_start[i] = std::max(s.op_start[o.step_first], p_end);
    s.op_end[i] = s.op_start[i] + o.dur;
    return;
  }
  int64_t start;
  const int64_t dep_ready =
      o.dep >= 0 ? s.op_end[o.dep] + o.dep_lag : std::numeric_limits<int64_t>::min();
  if (o.anchor >= 0) {
    const Piece& a = pieces_[o.anchor];
    const int64_t a_start = start_of(s, o.anchor);
    int64_t off = o.anchor_off;
    if (s.end[o.anchor] != kUnset) off = std::min(off, s.end[o.anchor] - a_start);
    if (w.graphs && a.captured) off = 0;
    const int64_t launched = a_start + off + (w.graphs ? 0 : o.delta);
    start = std::max({launched, p_end, dep_ready}) + gap;
  } else if (prev >= 0) {
    start = std::max(p_end, dep_ready) + gap;
  } else if (i > 0) {  // no launch, first on its stream: where the trace puts it after the last op
    start = s.op_start[i - 1] + (o.ts - ops_[i - 1].ts);
  } else {
    start = main_at(s, o.ts);
  }
  s.op_start[i] = start;
  double dur = o.simt_gemm && w.gemm_speedup > 1 ? o.dur / w.gemm_speedup : o.dur;
  if (w.pinned_copies && o.pageable_upload) {  // from page-locked memory: the DMA's own rate
    dur = std::min(dur, pinned_rate_ > 0 ? static_cast<double>(o.bytes) / pinned_rate_
                                         : dur / std::max(1.0, w.pinned_speedup));
  }
  if (o.rank_wait && w.no_late_ranks) dur = 0;
  s.op_end[i] = start + static_cast<int64_t>(dur);
}

StepGraph::IdleByCause StepGraph::attribute_idle(
    const std::vector<std::pair<int64_t, int64_t>>& windows) const {
  IdleByCause out;
  auto add = [&](WaitClass c, int64_t ns) {
    if (ns > 0) out.ns[static_cast<int>(c)] += ns;
  };
  // Charges [a, b) by walking the host chain of `thread` backwards from b: each piece its class
  // (a blocking call its blocking class); another thread's untraced time is its wait for the
  // training thread, whose chain takes over.
  auto walk = [&](int32_t thread, int64_t a, int64_t b) {
    while (a < b) {
      const auto [first, past] = thread_range_[thread];
      const auto begin = pieces_.begin() + static_cast<std::ptrdiff_t>(first);
      const auto end = pieces_.begin() + static_cast<std::ptrdiff_t>(past);
      auto it =
          std::upper_bound(begin, end, b - 1, [](int64_t v, const Piece& p) { return v < p.a; });
      if (it == begin) {  // before the chain's first piece
        add(WaitClass::kHost, b - a);
        return;
      }
      --it;
      if (it->b < b) {  // untraced time on another thread: it waited for the training thread
        if (thread == 0) {
          add(WaitClass::kHost, b - std::max(a, it->b));
        } else {
          thread = 0;
          continue;
        }
        b = it->b;
        continue;
      }
      const int64_t from = std::max(a, it->a);
      const int c = it->block ? it->block - 1 : it->cls;
      add(static_cast<WaitClass>(c), b - from);
      b = from;
    }
  };
  for (const auto& [lo, hi] : windows) {
    const auto first = std::lower_bound(ops_.begin(), ops_.end(), lo,
                                        [](const Op& o, int64_t v) { return o.ts < v; });
    int64_t busy_to = lo;  // the device is busy up to here
    for (auto it = ops_.begin(); it != first; ++it) busy_to = std::max(busy_to, it->ts + it->dur);
    for (auto it = first; it != ops_.end() && it->ts < hi; ++it) {
      const Op& o = *it;
      if (o.ts > busy_to) {  // an idle stretch [busy_to, o.ts): what held o back
        const int64_t a = busy_to;
        int64_t b = o.ts;
        if (o.anchor < 0 && o.dep < 0) {  // no launch linked to it: the graph cannot say
          add(WaitClass::kOther, b - a);
          out.unlinked_ns += b - a;
          busy_to = std::max(busy_to, o.ts + o.dur);
          continue;
        }
        // Held back after its launch returned, its stream's previous op ended and its cross-
        // stream wait: a few µs is the device's own gap between ops (launch overhead, the host
        // finding's); longer, the trace does not say why.
        int64_t ready = o.prev >= 0 ? ops_[o.prev].ts + ops_[o.prev].dur : a;
        if (o.anchor >= 0) {
          const int64_t call = pieces_[o.anchor].a + o.anchor_off;
          ready = std::max({ready, call + o.delta, call + o.launch_dur});
        }
        if (o.dep >= 0) ready = std::max(ready, ops_[o.dep].ts + ops_[o.dep].dur + o.dep_lag);
        const int64_t late = std::clamp<int64_t>(b - ready, 0, b - a);
        add(late <= std::max(latency_ns_, kCrossStreamLagNs) ? WaitClass::kHost : WaitClass::kOther,
            late);
        b -= late;
        if (b <= a) {
        } else if (o.dep >= 0 && ops_[o.dep].ts + ops_[o.dep].dur + o.dep_lag >= b) {
          add(ops_[o.dep].collective ? WaitClass::kComm : WaitClass::kSync, b - a);
        } else if (o.anchor >= 0) {
          const int64_t call = pieces_[o.anchor].a + o.anchor_off;
          add(WaitClass::kHost, b - std::max(a, call));  // the launch call and its latency
          walk(pieces_[o.anchor].thread, a, std::min(b, call));
        } else {
          add(WaitClass::kOther, b - a);
          out.unlinked_ns += b - a;
        }
      }
      busy_to = std::max(busy_to, o.ts + o.dur);
    }
    if (busy_to < hi) walk(0, busy_to, hi);  // the window's tail: the host had not launched yet
  }
  return out;
}

int64_t StepGraph::map_time(State& s, int64_t t) const {
  const auto it = std::lower_bound(ops_.begin(), ops_.end(), t,
                                   [](const Op& o, int64_t v) { return o.ts < v; });
  if (it != ops_.end() && it->ts == t) return s.op_start[it - ops_.begin()];
  const auto e =
      std::lower_bound(ops_by_end_.begin(), ops_by_end_.end(), t,
                       [&](int32_t o, int64_t v) { return ops_[o].ts + ops_[o].dur < v; });
  if (e != ops_by_end_.end() && ops_[*e].ts + ops_[*e].dur == t) return s.op_end[*e];
  return main_at(s, t);
}

std::vector<int64_t> StepGraph::replay(const std::vector<std::pair<int64_t, int64_t>>& windows,
                                       const WhatIf& w) const {
  State s;
  s.start.assign(pieces_.size(), kUnset);
  s.end.assign(pieces_.size(), kUnset);
  s.op_start.assign(ops_.size(), kUnset);
  s.op_end.assign(ops_.size(), kUnset);
  for (const int32_t item : order_) {
    if (item >= 0) {
      replay_piece(s, item, w);
    } else {
      replay_op(s, -1 - item, w);
    }
  }
  std::vector<int64_t> out;
  out.reserve(windows.size());
  for (const auto& [lo, hi] : windows) {
    // A window ends no sooner than the device work that ended inside it.
    int64_t end = map_time(s, hi);
    const auto first = std::lower_bound(ops_.begin(), ops_.end(), lo,
                                        [](const Op& o, int64_t v) { return o.ts < v; });
    for (auto it = first; it != ops_.end() && it->ts < hi; ++it)
      if (it->ts + it->dur <= hi) end = std::max(end, s.op_end[it - ops_.begin()]);
    out.push_back(std::max<int64_t>(0, end - map_time(s, lo)));
  }
  return out;
}

}  // namespace ft::profiler::replay
