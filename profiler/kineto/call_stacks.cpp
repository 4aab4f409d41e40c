// call_stacks.cpp: HTA's per-thread CPU call stacks (call_stacks.h).
#include "call_stacks.h"

#include <algorithm>
#include <map>
#include <utility>

namespace ft::profiler::kineto {
namespace {

// One end of a CPU span, as HTA's trace_call_stack sorts them.
struct End {
  int64_t row;   // index into rows
  int64_t dur;   // HTA's integer duration; a sub-µs span's -1 is taken as 0 (see below)
  int kind;      // -1 open, +1 close
  int64_t time;  // ts or ts + dur
};

// HTA's _less_than. HTA raises "Unexpected case" when a zero-length span meets one of -1 µs
// (a sub-µs span after its rounding: ns_resolution_trace, nccl_parser_config); here such a span
// is zero-length, an instant nested where it starts.
bool less_than(const End& x, const End& y) {
  if (x.time != y.time) return x.time < y.time;
  if (x.row == y.row) return x.kind == -1;
  if (x.dur == 0 || y.dur == 0) {
    if (x.dur == 0 && y.dur > 0) return y.kind == 1;
    if (x.dur > 0 && y.dur == 0) return x.kind == -1;
    if (x.kind == -1 && y.kind == -1) return x.row < y.row;
    if (x.kind == 1 && y.kind == 1) return x.row > y.row;
    return x.kind == -1;
  }
  if (x.kind == 1 && y.kind == -1) return true;
  if (x.kind == -1 && y.kind == 1) return false;
  if (x.kind == -1 && y.kind == -1 && x.dur != y.dur) return x.dur > y.dur;
  if (x.kind == 1 && y.kind == 1 && x.dur != y.dur) return x.dur < y.dur;
  return x.kind == -1 ? x.row < y.row : x.row > y.row;
}

}  // namespace

CallStacks build_call_stacks(const CpTrace& t) {
  const std::vector<CpRow>& rows = t.rows;
  std::map<std::pair<int64_t, int64_t>, std::vector<End>> threads;
  for (size_t i = 0; i < rows.size(); ++i) {
    const CpRow& r = rows[i];
    if (r.gpu()) continue;
    const int64_t dur = std::max<int64_t>(r.dur, 0);
    auto& ends = threads[{r.pid, r.tid}];
    ends.push_back({static_cast<int64_t>(i), dur, -1, r.ts});
    ends.push_back({static_cast<int64_t>(i), dur, 1, r.ts + dur});
  }
  CallStacks cs;
  cs.nodes.resize(rows.size());
  for (auto& [key, ends] : threads) {
    std::stable_sort(ends.begin(), ends.end(), less_than);
    std::vector<int64_t> stack;
    for (const End& e : ends) {
      if (e.kind == -1) {
        CallStacks::Node& n = cs.nodes[static_cast<size_t>(e.row)];
        if (!stack.empty()) {
          CallStacks::Node& p = cs.nodes[static_cast<size_t>(stack.back())];
          n.parent = stack.back();
          n.depth = p.depth + 1;
          p.children.push_back(e.row);
        }
        stack.push_back(e.row);
        cs.open_order.push_back(e.row);
      } else if (!stack.empty()) {
        stack.pop_back();
      }
    }
  }
  for (auto it = cs.open_order.rbegin(); it != cs.open_order.rend(); ++it) {
    CallStacks::Node& n = cs.nodes[static_cast<size_t>(*it)];
    if (const int64_t k = cs.kernel_of(t, *it); k >= 0) {
      n.num_kernels += 1;
      n.kernel_dur_sum += rows[static_cast<size_t>(k)].dur;
    }
    if (n.parent >= 0) {
      CallStacks::Node& p = cs.nodes[static_cast<size_t>(n.parent)];
      p.num_kernels += n.num_kernels;
      p.kernel_dur_sum += n.kernel_dur_sum;
    }
  }
  return cs;
}

}  // namespace ft::profiler::kineto
