// hta_frame.h: a rank's events after HTA's load rules (integer µs, stream, correlation).
#pragma once

#include <cstdint>
#include <vector>

#include "ft/profiler/event.h"
#include "kineto_names.h"

namespace ft::profiler::kineto {

struct HtaRow {
  int64_t ts = 0;   // ceil(ts µs)
  int64_t dur = 0;  // floor(ts + dur) - ts; may be -1 for sub-µs events, as in HTA
  int64_t stream = -1;
  uint64_t corr = 0;  // 0 = none
  uint32_t name = 0;
  HtaKernelType type = HtaKernelType::kOther;
  bool sync = false;  // cuda_sync (excluded from the idle breakdown)
  int64_t end() const { return ts + dur; }
  bool gpu() const { return stream != -1; }
};

struct HtaFrame {
  int rank = 0;
  std::vector<HtaRow> rows;  // file order
};

// Applies HTA's loading rules: spans with a source category, integer-µs rounding, and the
// last-ProfilerStep cut (see docs/hta_parity.md).
HtaFrame make_hta_frame(const Trace& trace);

}  // namespace ft::profiler::kineto
