// hta_frame.h: a rank's events after HTA's load rules (integer µs, stream, correlation).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ft/profiler/event.h"
#include "ft/profiler/kineto_trace.h"
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
  std::vector<HtaRow> rows;          // file order; CPU rows only when they carry a correlation id
  size_t uncorrelated_cpu_rows = 0;  // kept by HTA's load rules but used by no analysis
  // ts range of every kept row, uncorrelated CPU rows included (HTA's get_trace_duration).
  int64_t ts_min = 0, ts_max = 0;
  // Copy and memset rows: (row, the trace's "memory bandwidth (GB/s)"; 0 where it has none).
  std::vector<std::pair<uint32_t, double>> mem_bw;
  size_t events_after_load_filter() const { return rows.size() + uncorrelated_cpu_rows; }
};

// Rows of one side (CPU or GPU) sorted by correlation id, file order kept among equals: the
// joins HTA does with pandas, without per-row hash-map nodes.
class CorrIndex {
 public:
  struct Entry {
    uint64_t corr;
    uint32_t row;
  };
  CorrIndex(const std::vector<HtaRow>& rows, bool gpu);
  std::pair<const Entry*, const Entry*> find(uint64_t corr) const;  // [first, last)
  bool contains(uint64_t corr) const {
    const auto r = find(corr);
    return r.first != r.second;
  }

 private:
  std::vector<Entry> entries_;
};

// pandas' Series.quantile(q) (linear interpolation) of sorted values (hta_analyses.cpp).
double pandas_quantile(const std::vector<int64_t>& sorted, double q);

// Applies HTA's loading rules: spans with a source category, integer-µs rounding, and the
// last-ProfilerStep cut (see docs/hta_parity.md). With `consume` (== &trace), the records are
// freed as the last pass walks past them.
HtaFrame make_hta_frame(const KinetoTrace& trace, KinetoTrace* consume = nullptr);

}  // namespace ft::profiler::kineto
