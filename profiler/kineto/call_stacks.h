// call_stacks.h: HTA's per-thread CPU call stacks over a rank's rows (its CallStackGraph).
#pragma once

#include <cstdint>
#include <vector>

#include "critical_path_rows.h"

namespace ft::profiler::kineto {

// Every CPU row's place in its thread's call stack, as HTA's trace_call_stack builds it: span
// ends sorted by HTA's comparator (time; a span's own ends; zero-length spans inside the span
// they touch; closes before opens; longer opens first), parents from the open stack. A launch's
// device op is its child (HTA's _link_cpu_and_gpu): num_kernels and kernel_dur_sum count the
// device ops under a span. A sub-µs span (rounded duration -1 µs, where HTA raises "Unexpected
// case") is taken as an instant.
struct CallStacks {
  struct Node {
    int64_t parent = -1;  // row of the enclosing CPU span, -1 = the thread's root
    int depth = 0;        // 0 for a thread's outermost spans
    std::vector<int64_t> children;
    int64_t num_kernels = 0, kernel_dur_sum = 0;
  };
  std::vector<Node> nodes;          // by row (GPU rows keep the defaults)
  std::vector<int64_t> open_order;  // CPU rows, each after its parent
  // The device op a CPU row launched (its partner on a stream), or -1.
  int64_t kernel_of(const CpTrace& t, int64_t row) const {
    const int64_t p = t.rows[static_cast<size_t>(row)].partner;
    return p >= 0 && t.rows[static_cast<size_t>(p)].gpu() ? p : -1;
  }
};

CallStacks build_call_stacks(const CpTrace& t);

}  // namespace ft::profiler::kineto
