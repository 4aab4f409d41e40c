// cupti_counters.cpp: HTA v0.6.1's get_cupti_counter_data_with_operators on a rank's rows.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "call_stacks.h"
#include "critical_path_rows.h"

namespace ft::profiler::kineto {

using nlohmann::json;

json cupti_counter_data_with_operators(const CpTrace& t) {
  const std::vector<CpRow>& rows = t.rows;
  std::vector<int64_t> kernels, launches;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].cat == "cuda_profiler_range") kernels.push_back(static_cast<int64_t>(i));
    if (rows[i].cat == "cuda_runtime" && rows[i].name.rfind("cudaLaunchKernel", 0) == 0)
      launches.push_back(static_cast<int64_t>(i));
  }
  if (kernels.empty()) return nullptr;
  // HTA pairs the i-th kernel with the i-th launch, both in time order.
  auto by_ts = [&](int64_t a, int64_t b) { return rows[a].ts < rows[b].ts; };
  std::stable_sort(kernels.begin(), kernels.end(), by_ts);
  std::stable_sort(launches.begin(), launches.end(), by_ts);
  if (kernels.size() != launches.size()) {
    return {{"success", false},
            {"error", fmt::format("{} kernel launches and {} cuda_profiler_range kernels do not "
                                  "pair up",
                                  launches.size(), kernels.size())}};
  }
  const CallStacks cs = build_call_stacks(t);
  json out = json::array();
  for (size_t i = 0; i < kernels.size(); ++i) {
    const CpRow& k = rows[kernels[i]];
    // The launch and the spans enclosing it, outermost first, by start (spans that start in the
    // same µs stay outermost first, as HTA's result has them); the cpu_ops among them.
    std::vector<int64_t> stack;
    for (int64_t r = launches[i]; r >= 0; r = cs.nodes[r].parent) stack.push_back(r);
    std::reverse(stack.begin(), stack.end());
    std::stable_sort(stack.begin(), stack.end(), by_ts);
    json ops = json::array();
    for (const int64_t r : stack)
      if (rows[r].cat == "cpu_op") ops.push_back(rows[r].name);
    json row = {{"name", k.name},
                {"ts", k.ts},
                {"dur", k.dur},
                {"op_stack", ops},
                {"top_level_op", ops.empty() ? "" : ops.front()},
                {"bottom_level_op", ops.empty() ? "" : ops.back()}};
    for (const auto& [name, v] : k.counters) {
      // Counts are integers in the trace; a value with a fraction stays a double.
      if (std::floor(v) == v && std::fabs(v) < 9.0e15) {
        row[name] = static_cast<int64_t>(v);
      } else {
        row[name] = v;
      }
    }
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace ft::profiler::kineto
