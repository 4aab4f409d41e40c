// cpu_work.cpp: kCpuWork on the CPU operators that launch no device work (cpu_work.h).
#include "cpu_work.h"

#include <algorithm>
#include <string_view>
#include <tuple>
#include <vector>

namespace ft::profiler::kineto {
namespace {

bool runtime_call(const Event& e) {
  return !e.track.device && e.phase == Phase::kSpan &&
         (e.category == Category::kHost || e.category == Category::kSync ||
          e.category == Category::kAlloc);
}

bool cpu_operator(const Event& e) {
  return !e.track.device && e.phase == Phase::kSpan && e.dur_ns >= kCpuWorkMinNs &&
         (e.category == Category::kCompute || e.category == Category::kOptimizer);
}

// Operators that compute nothing whatever their tensors' device: views and metadata,
// allocation, and the autograd engine's wrappers. On a slow or busy host they run 50-100 µs
// without a launch (DDP's bucket views in nccl_parser_config: aten::narrow, aten::slice,
// aten::unflatten_dense_tensors), which is dispatch, not the program's CPU work.
bool computes_nothing(std::string_view n) {
  static constexpr std::string_view kParts[] = {
      "view",    "narrow", "slice",          "select",     "transpose",
      "permute", "expand", "reshape",        "squeeze",    "as_strided",
      "detach",  "alias",  "empty",          "flatten",    "split",
      "chunk",   "unbind", "AccumulateGrad", "autograd::", "Backward",
      "resize_", "set_",   "lift",           "contiguous", "record_param_comms"};
  for (std::string_view p : kParts)
    if (n.find(p) != std::string_view::npos) return true;
  return n == "aten::t" || n == "aten::numpy_T" || n == "aten::to" || n == "aten::clone";
}

// A Python frame (with_stack=True) is the user's Python, kept as such (step_replay.cpp): what it
// does (logging, metrics, data handling) the trace does not say; its operators are flagged.
bool python_frame(std::string_view n) {
  return n.find(".py(") != std::string_view::npos || n.rfind("<built-in", 0) == 0;
}

}  // namespace

size_t mark_cpu_work(Event* events, size_t n, const StringTable& names) {
  bool device = false;
  for (size_t i = 0; i < n && !device; ++i) device = events[i].track.device;
  if (!device) return 0;
  // Runtime calls' starts by (pid, tid, ts): an operator holds one when a call of its thread
  // starts inside it.
  std::vector<std::tuple<uint32_t, uint32_t, int64_t>> calls;
  for (size_t i = 0; i < n; ++i)
    if (runtime_call(events[i]))
      calls.emplace_back(events[i].track.pid, events[i].track.tid, events[i].ts_ns);
  std::sort(calls.begin(), calls.end());
  size_t flagged = 0;
  std::vector<int8_t> memo(names.size(), -1);  // name -> computes nothing
  for (size_t i = 0; i < n; ++i) {
    Event& e = events[i];
    if (!cpu_operator(e)) continue;
    if (e.name < memo.size() && memo[e.name] < 0)
      memo[e.name] = computes_nothing(names.at(e.name)) || python_frame(names.at(e.name)) ? 1 : 0;
    if (e.name >= memo.size() || memo[e.name] == 1) continue;
    const auto it = std::lower_bound(calls.begin(), calls.end(),
                                     std::make_tuple(e.track.pid, e.track.tid, e.ts_ns));
    const bool holds = it != calls.end() && std::get<0>(*it) == e.track.pid &&
                       std::get<1>(*it) == e.track.tid && std::get<2>(*it) < e.end_ns();
    if (!holds) {
      e.flags |= kCpuWork;
      ++flagged;
    }
  }
  return flagged;
}

}  // namespace ft::profiler::kineto
