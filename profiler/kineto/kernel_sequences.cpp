// kernel_sequences.cpp: HTA v0.6.1's get_frequent_cuda_kernel_sequences on a rank's rows.
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "critical_path_rows.h"

namespace ft::profiler::kineto {
namespace {

using nlohmann::json;

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

struct Node {
  int64_t parent = -1;  // row of the parent CPU span, -1 = the thread's root
  int depth = 0;        // 0 for a thread's outermost spans
  std::vector<int64_t> children;
  int64_t num_kernels = 0, kernel_dur_sum = 0;
};

}  // namespace

json frequent_kernel_sequences(const CpTrace& t, const std::string& operator_name,
                               size_t min_pattern_len) {
  const std::vector<CpRow>& rows = t.rows;
  // Call stacks per CPU thread.
  std::map<std::pair<int64_t, int64_t>, std::vector<End>> threads;
  for (size_t i = 0; i < rows.size(); ++i) {
    const CpRow& r = rows[i];
    if (r.gpu()) continue;
    const int64_t dur = std::max<int64_t>(r.dur, 0);
    auto& ends = threads[{r.pid, r.tid}];
    ends.push_back({static_cast<int64_t>(i), dur, -1, r.ts});
    ends.push_back({static_cast<int64_t>(i), dur, 1, r.ts + dur});
  }
  std::map<int64_t, Node> nodes;
  std::vector<int64_t> open_order;  // parents before children
  for (auto& [key, ends] : threads) {
    std::stable_sort(ends.begin(), ends.end(), less_than);
    std::vector<int64_t> stack;
    for (const End& e : ends) {
      if (e.kind == -1) {
        Node& n = nodes[e.row];
        if (!stack.empty()) {
          n.parent = stack.back();
          n.depth = nodes[stack.back()].depth + 1;
          nodes[stack.back()].children.push_back(e.row);
        }
        stack.push_back(e.row);
        open_order.push_back(e.row);
      } else if (!stack.empty()) {
        stack.pop_back();
      }
    }
  }
  // Kernels under each span: a launch's kernel is its child (HTA's _link_cpu_and_gpu).
  auto kernel_of = [&](int64_t row) -> int64_t {
    const int64_t p = rows[row].partner;
    return p >= 0 && rows[p].gpu() ? p : -1;
  };
  for (auto it = open_order.rbegin(); it != open_order.rend(); ++it) {
    Node& n = nodes[*it];
    if (const int64_t k = kernel_of(*it); k >= 0) {
      n.num_kernels += 1;
      n.kernel_dur_sum += rows[k].dur;
    }
    if (n.parent >= 0) {
      nodes[n.parent].num_kernels += n.num_kernels;
      nodes[n.parent].kernel_dur_sum += n.kernel_dur_sum;
    }
  }
  // Roots: the shallowest spans whose name holds `operator_name`, with enough kernels.
  int min_depth = INT32_MAX;
  for (const auto& [row, n] : nodes)
    if (rows[row].name.find(operator_name) != std::string::npos)
      min_depth = std::min(min_depth, n.depth);
  struct Pattern {
    int64_t count = 0, gpu_us = 0, cpu_us = 0;
  };
  std::map<std::vector<std::string>, Pattern> patterns;
  for (const int64_t row : open_order) {
    const Node& n = nodes[row];
    if (n.depth != min_depth || rows[row].name.find(operator_name) == std::string::npos ||
        n.num_kernels < static_cast<int64_t>(min_pattern_len))
      continue;
    // The kernels of the subtree's leaves (HTA's get_stack_of_node), in start order.
    std::vector<int64_t> kernels, todo{row};
    while (!todo.empty()) {
      const int64_t r = todo.back();
      todo.pop_back();
      const Node& c = nodes[r];
      if (c.children.empty()) {
        if (const int64_t k = kernel_of(r); k >= 0) kernels.push_back(k);
      }
      todo.insert(todo.end(), c.children.begin(), c.children.end());
    }
    std::stable_sort(kernels.begin(), kernels.end(),
                     [&](int64_t a, int64_t b) { return rows[a].ts < rows[b].ts; });
    std::vector<std::string> key{rows[row].name};
    for (const int64_t k : kernels) key.push_back(rows[k].name);
    Pattern& p = patterns[key];
    p.count += 1;
    p.gpu_us += n.kernel_dur_sum;
    p.cpu_us += rows[row].dur;
  }
  std::vector<std::pair<std::string, Pattern>> sorted;
  for (const auto& [key, p] : patterns) {
    std::string joined;
    for (const std::string& s : key) joined += (joined.empty() ? "" : "|") + s;
    sorted.emplace_back(joined, p);
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return std::tie(b.second.count, a.first) < std::tie(a.second.count, b.first);
  });
  json out = json::array();
  for (const auto& [pattern, p] : sorted) {
    out.push_back({{"pattern", pattern},
                   {"count", p.count},
                   {"GPU kernel duration (us)", p.gpu_us},
                   {"CPU op duration (us)", p.cpu_us}});
  }
  return out;
}

}  // namespace ft::profiler::kineto
