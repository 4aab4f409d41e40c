// step_graph_build.cpp: the step graph built from a trace's host spans and device ops
// (StepGraph::build, step_replay.h).
#include <algorithm>
#include <limits>
#include <map>
#include <string>

#include "device_attribution.h"
#include "ft/profiler/classifier.h"
#include "interval_sweep.h"
#include "step_replay.h"

namespace ft::profiler::replay {
namespace {

constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();
constexpr int64_t kDefaultLaunchNs = 5000;  // when the trace links no launch to its op
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

// What the build's steps share.
struct StepGraph::Build {
  const Trace& trace;
  std::vector<const Event*> dev;  // the device's busy spans, by start (ops_ in this order)
  IdIndex<int32_t> op_of;         // correlation id -> op
  struct Launch {
    int32_t thread;
    int64_t ts, dur;
  };
  IdIndex<Launch> launch_of;  // correlation id -> launch call
  PythonNames python;
  explicit Build(const Trace& t) : trace(t), python(t) {}
};

bool StepGraph::build(const Trace& trace, const Track& main, uint32_t device_pid, int64_t lo,
                      int64_t hi) {
  pieces_.clear(), waits_.clear(), ops_.clear(), order_.clear(), ops_by_end_.clear();
  Build b(trace);
  if (!collect_ops(b, device_pid, lo, hi)) return false;
  build_pieces(b, main, lo, hi);
  link_ops(b);
  find_stream_waits(b);
  order_items();
  return true;
}

// Device ops: the busy spans of the device, by start; their correlation ids; their ends' order.
bool StepGraph::collect_ops(Build& b, uint32_t device_pid, int64_t lo, int64_t hi) {
  std::vector<const Event*>& dev = b.dev;
  for (const Event& e : b.trace.events)
    if (e.track.device && e.track.pid == device_pid && device_attribution::is_busy(e) &&
        e.end_ns() > lo && e.ts_ns <= hi)
      dev.push_back(&e);
  if (dev.empty()) return false;
  std::sort(dev.begin(), dev.end(), [](const Event* a, const Event* b) {
    return a->ts_ns != b->ts_ns ? a->ts_ns < b->ts_ns : a->end_ns() < b->end_ns();
  });
  b.op_of.reserve(dev.size());
  for (size_t i = 0; i < dev.size(); ++i)
    if (dev[i]->id != 0) b.op_of.add(dev[i]->id, static_cast<int32_t>(i));
  b.op_of.seal();
  ops_by_end_.resize(dev.size());
  for (size_t i = 0; i < dev.size(); ++i) ops_by_end_[i] = static_cast<int32_t>(i);
  std::sort(ops_by_end_.begin(), ops_by_end_.end(),
            [&](int32_t x, int32_t y) { return dev[x]->end_ns() < dev[y]->end_ns(); });
  return true;
}

// Host threads of the training process: the training thread, and those that launch on the
// device (PyTorch's autograd device thread runs the backward's launches); each a chain of pieces
// under its innermost spans.
void StepGraph::build_pieces(Build& b, const Track& main, int64_t lo, int64_t hi) {
  const Trace& trace = b.trace;
  std::map<uint32_t, std::vector<const Event*>> by_tid;
  std::map<uint32_t, bool> launches;
  std::vector<int64_t> launch_costs;
  for (const Event& e : trace.events) {
    if (e.track.device || e.track.pid != main.pid || e.phase != Phase::kSpan || e.dur_ns <= 0 ||
        e.end_ns() <= lo || e.ts_ns >= hi || is_step_span(trace, e))
      continue;
    by_tid[e.track.tid].push_back(&e);
    if (e.id != 0 && b.op_of.find(e.id)) {
      launches[e.track.tid] = true;
      if (e.category == Category::kHost) launch_costs.push_back(e.dur_ns);
    }
  }
  std::vector<uint32_t> tids = {main.tid};
  pid_ = main.pid;
  for (const auto& [tid, l] : launches)
    if (tid != main.tid && tids.size() < kMaxThreads) tids.push_back(tid);  // others: unlinked

  launch_cost_ns_ = quantile(launch_costs, 0.5, kDefaultLaunchNs);
  const int64_t dev_lo = b.dev.front()->ts_ns, dev_hi = b.dev[ops_by_end_.back()]->end_ns();
  b.launch_of.reserve(b.dev.size());  // one launch per op, as a rule
  thread_range_.clear();
  // At most 2n + 1 segments a thread, taken as they come (not held): reserved for all threads at
  // once (a later thread's own reserve would copy the pieces so far), never grown by doubling.
  size_t most = 0;
  for (const uint32_t tid : tids) most += 2 * by_tid[tid].size() + 1;
  pieces_.reserve(most);
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
      if (e.id != 0 && b.op_of.find(e.id))
        b.launch_of.add(e.id, Build::Launch{static_cast<int32_t>(t), e.ts_ns, e.dur_ns});
    }
    const size_t first = pieces_.size();
    bool after_gap = true;
    sweep::sweep_spans_each(std::move(ivs), from, to, [&](const sweep::Segment& s) {
      const Event* ev = s.label >= 0 ? spans[s.label] : nullptr;
      if (ev == nullptr && t != 0) {  // another thread's untraced time: it waits
        after_gap = true;
        return;
      }
      Piece p = host_piece(b, ev, s.a, s.b);
      p.thread = static_cast<uint16_t>(t);
      p.burst_first = after_gap;
      after_gap = false;
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
    thread_range_.emplace_back(first, pieces_.size());
  }
  b.launch_of.seal();
  tids_ = tids;
  marked_.clear();
}

// The piece [a, bnd) under `ev` (null: untraced): its class, whether a graph captures it, and
// the op a blocking call that ends there waited for. A launch or asynchronous copy call over
// 100 µs that returns right after an op ends waited for a slot in a full launch queue: it blocks
// on that op.
StepGraph::Piece StepGraph::host_piece(Build& b, const Event* ev, int64_t a, int64_t bnd) {
  const Trace& trace = b.trace;
  Piece p;
  p.a = a, p.b = bnd;
  p.cls = static_cast<uint8_t>(device_attribution::idle_class(ev));
  p.untraced = ev == nullptr;
  p.captured = captured(trace, ev, bnd - a, b.python);
  p.cpu_work = device_attribution::is_cpu_work(ev);
  int bc = ev ? device_attribution::blocking_class(trace, *ev) : -1;
  const int32_t* own_op = ev && ev->id != 0 ? b.op_of.find(ev->id) : nullptr;
  const bool linked = own_op != nullptr;
  bool queue_full = false;
  if (bc < 0 && linked && ev->dur_ns > kQueueFullMinNs) {
    bc = static_cast<int>(WaitClass::kHost);
    queue_full = true;
  }
  if (bc < 0 || bc == static_cast<int>(WaitClass::kComm) || bnd != ev->end_ns()) return p;
  // The op the call waited for: its own copy, else the last op to end before it returned.
  const std::vector<const Event*>& dev = b.dev;
  int32_t w = -1;
  if (linked && !queue_full) {
    w = *own_op;
  } else {
    const auto past = std::upper_bound(ops_by_end_.begin(), ops_by_end_.end(), ev->end_ns(),
                                       [&](int64_t v, int32_t o) { return v < dev[o]->end_ns(); });
    if (past != ops_by_end_.begin()) w = *(past - 1);
  }
  // A pageable upload returns once its last chunk is staged, a few µs before that chunk's DMA
  // ends (seen on an H200: 12-15 µs): its own copy may end that much after it.
  const int64_t slack = linked && !queue_full ? kCrossStreamLagNs : 0;
  if (w >= 0 && dev[w]->end_ns() >= ev->ts_ns && dev[w]->end_ns() <= ev->end_ns() + slack &&
      (!queue_full || ev->end_ns() - dev[w]->end_ns() <= kCrossStreamLagNs)) {
    p.block = static_cast<uint8_t>(bc + 1);
    p.wait = static_cast<int32_t>(waits_.size());
    waits_.push_back({w, std::max<int64_t>(0, ev->end_ns() - dev[w]->end_ns())});
  }
  return p;
}

// Ops: anchor (the piece its launch starts in), stream predecessor, latency and delay.
void StepGraph::link_ops(Build& b) {
  const Trace& trace = b.trace;
  const std::vector<const Event*>& dev = b.dev;
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
    if (const Build::Launch* l = e.id != 0 ? b.launch_of.find(e.id) : nullptr) {
      const auto [first, past] = thread_range_[l->thread];
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
}

// Each op's delay beyond its launch and stream; one that started right after an op on another
// stream ended waited for it (cudaStreamWaitEvent).
void StepGraph::find_stream_waits(const Build& b) {
  const std::vector<const Event*>& dev = b.dev;
  // By end: the last op before each that ran on another stream (-1: none), so that finding the
  // op on another stream that ended last before an instant is one step, not a walk back over
  // the stream's own ops.
  std::vector<int64_t> other_stream_before(ops_by_end_.size(), -1);
  for (size_t j = 1; j < ops_by_end_.size(); ++j) {
    other_stream_before[j] = dev[ops_by_end_[j - 1]]->track.tid != dev[ops_by_end_[j]]->track.tid
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
}

// Processing order: pieces at their end, ops at their start (a piece first on a tie: an op may
// be launched from the piece that starts there).
void StepGraph::order_items() {
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
    return;
  }
  // Merged left to right: on a tie the earlier run (a lower thread, pieces before ops) first.
  for (size_t r = 1; r + 1 < runs.size(); ++r) {
    std::inplace_merge(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(runs[r]),
                       order_.begin() + static_cast<std::ptrdiff_t>(runs[r + 1]), by_key);
  }
}

}  // namespace ft::profiler::replay
