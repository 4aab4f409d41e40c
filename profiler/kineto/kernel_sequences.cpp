// kernel_sequences.cpp: HTA v0.6.1's get_frequent_cuda_kernel_sequences on a rank's rows.
#include <algorithm>
#include <climits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "call_stacks.h"
#include "critical_path_rows.h"

namespace ft::profiler::kineto {

using nlohmann::json;

json frequent_kernel_sequences(const CpTrace& t, const std::string& operator_name,
                               size_t min_pattern_len) {
  const std::vector<CpRow>& rows = t.rows;
  const CallStacks cs = build_call_stacks(t);
  const auto& nodes = cs.nodes;
  const auto& open_order = cs.open_order;
  auto kernel_of = [&](int64_t row) { return cs.kernel_of(t, row); };
  // Roots: the shallowest spans whose name holds `operator_name`, with enough kernels.
  int min_depth = INT32_MAX;
  for (const int64_t row : open_order)
    if (rows[row].name.find(operator_name) != std::string::npos)
      min_depth = std::min(min_depth, nodes[row].depth);
  struct Pattern {
    int64_t count = 0, gpu_us = 0, cpu_us = 0;
  };
  std::map<std::vector<std::string>, Pattern> patterns;
  for (const int64_t row : open_order) {
    const CallStacks::Node& n = nodes[row];
    if (n.depth != min_depth || rows[row].name.find(operator_name) == std::string::npos ||
        n.num_kernels < static_cast<int64_t>(min_pattern_len))
      continue;
    // The kernels of the subtree's leaves (HTA's get_stack_of_node), in start order.
    std::vector<int64_t> kernels, todo{row};
    while (!todo.empty()) {
      const int64_t r = todo.back();
      todo.pop_back();
      const CallStacks::Node& c = nodes[r];
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
