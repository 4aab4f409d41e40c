// step_replay.cpp: the training rank's dependency graph re-run under a what-if (step_replay.h;
// built in step_graph_build.cpp).
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
constexpr uint8_t cls(WaitClass c) { return static_cast<uint8_t>(c); }

}  // namespace

struct StepGraph::State {
  std::vector<int64_t> start, end;        // pieces (kUnset until known)
  std::vector<int64_t> op_start, op_end;  // ops
  int64_t main_shift = 0;                 // replayed - traced time at the last training piece
};

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
    } else if (bc == cls(WaitClass::kSync) && w.pinned_copies &&
               ops_[waits_[p.wait].op].pageable_upload) {
      // The stream sync a blocking upload adds (PyTorch's copy_ from pageable memory without
      // non_blocking): a non_blocking copy from pinned memory has none.
      end = st;
    } else if (bc == cls(WaitClass::kMemory) && w.no_alloc) {
      end = st;
    } else if (const Wait& on = waits_[p.wait]; s.op_end[on.op] != kUnset) {
      end = std::max(st + std::min(own, on.ret), s.op_end[on.op] + on.ret);
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
