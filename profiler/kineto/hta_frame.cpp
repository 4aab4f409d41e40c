// hta_frame.cpp: HTA's loading rules applied to an imported Trace.
#include "hta_frame.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "ft/profiler/kineto_reader.h"

namespace ft::profiler::kineto {

namespace {

// The double a JSON µs value with up to 3 decimals parses to, rebuilt from its ns value: exact
// integers stay exact; below 2^53 ns one division is correctly rounded, like the parse itself.
double micros_double(int64_t ns) {
  if (ns % 1000 == 0) return static_cast<double>(ns / 1000);
  constexpr int64_t kExact = int64_t{1} << 53;
  if (ns > -kExact && ns < kExact) return static_cast<double>(ns) / 1000.0;
  return static_cast<double>(ns / 1000) + static_cast<double>(ns % 1000) / 1000.0;
}

}  // namespace

HtaFrame make_hta_frame(const KinetoTrace& trace, KinetoTrace* consume) {
  HtaFrame f;
  f.rank = trace_rank(trace);
  // Kernel type and "is a ProfilerStep" are functions of the name: classify each name once.
  std::vector<int8_t> type_of(trace.names.size(), -1);
  std::vector<int8_t> is_step(trace.names.size(), -1);
  auto classify = [&](uint32_t name) {
    if (type_of[name] < 0) {
      const std::string& n = trace.names.at(name);
      type_of[name] = static_cast<int8_t>(hta_kernel_type(n));
      is_step[name] = n.rfind("ProfilerStep#", 0) == 0 ? 1 : 0;
    }
  };
  auto kept = [](const Event& e) {
    return e.phase == Phase::kSpan && !(e.flags & kNoSourceCategory);
  };
  auto make_row = [&](const Event& e) {
    // HTA works on the JSON's float µs: ts = ceil(ts), end = floor(ts + dur), computed on the
    // same doubles the JSON text parses to (see micros_double).
    HtaRow r;
    r.ts = static_cast<int64_t>(std::ceil(micros_double(e.ts_ns)));
    r.dur =
        static_cast<int64_t>(std::floor(micros_double(e.ts_ns) + micros_double(e.dur_ns))) - r.ts;
    r.stream = e.track.device && !(e.flags & kNoStream) ? static_cast<int64_t>(e.track.tid) : -1;
    r.corr = e.id;
    r.name = e.name;
    r.sync = e.category == Category::kSync && e.track.device;
    r.type = static_cast<HtaKernelType>(type_of[e.name]);
    return r;
  };
  bool any_row = false;
  auto seen = [&](const HtaRow& r) {
    f.ts_min = any_row ? std::min(f.ts_min, r.ts) : r.ts;
    f.ts_max = any_row ? std::max(f.ts_max, r.ts) : r.ts;
    any_row = true;
  };
  // Appends a row; copies and memsets keep their bandwidth (kineto_reader: Event::value of an
  // imported device span).
  auto push = [&](const HtaRow& r, const Event& e) {
    seen(r);
    if (r.gpu() && r.type == HtaKernelType::kMemory) {
      f.mem_bw.emplace_back(static_cast<uint32_t>(f.rows.size()), e.value);
    }
    f.rows.push_back(r);
  };
  // Frees the records a pass has walked past (its last pass only).
  auto walked = [&](size_t i) {
    if (consume && ((i + 1) & KinetoTrace::kBlockMask) == 0) consume->release_until(i + 1);
  };
  // Pass 1: the last ProfilerStep (HTA cuts the trace there when it has two or more), and the
  // row count. CPU rows without a correlation id take part in no analysis; they are only counted
  // (HTA's events_after_load_filter), which keeps the frame to launches and GPU work.
  int64_t last_step = INT64_MIN;
  size_t steps = 0, cpu_rows = 0, gpu_rows = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    const Event e = trace.event(i);
    if (!kept(e)) continue;
    classify(e.name);
    const HtaRow r = make_row(e);
    if (is_step[e.name]) {
      ++steps;
      last_step = std::max(last_step, r.ts);
    }
    if (r.gpu()) {
      ++gpu_rows;
    } else if (r.corr != 0) {
      ++cpu_rows;
    }
  }
  if (steps < 2) {
    // No cut: every row, in file order.
    f.rows.reserve(cpu_rows + gpu_rows);
    for (size_t i = 0; i < trace.size(); ++i) {
      const Event e = trace.event(i);
      walked(i);
      if (!kept(e)) continue;
      const HtaRow r = make_row(e);
      if (r.gpu() || r.corr != 0) {
        push(r, e);
      } else {
        seen(r);
        ++f.uncorrelated_cpu_rows;
      }
    }
    if (consume) consume->release_all();
    return f;
  }
  // The cut keeps CPU rows that start before the last step and the GPU rows correlated with a
  // kept CPU row, CPU rows first (each side in file order).
  f.rows.reserve(cpu_rows + gpu_rows);
  std::vector<uint64_t> kept_corr;
  kept_corr.reserve(cpu_rows);
  for (size_t i = 0; i < trace.size(); ++i) {
    const Event e = trace.event(i);
    if (!kept(e)) continue;
    const HtaRow r = make_row(e);
    if (r.gpu() || r.ts >= last_step) continue;
    if (r.corr == 0) {
      seen(r);
      ++f.uncorrelated_cpu_rows;
    } else {
      push(r, e);
      kept_corr.push_back(r.corr);
    }
  }
  std::sort(kept_corr.begin(), kept_corr.end());
  for (size_t i = 0; i < trace.size(); ++i) {
    const Event e = trace.event(i);
    walked(i);
    if (!kept(e) || !e.track.device || (e.flags & kNoStream) || e.id == 0) continue;
    if (std::binary_search(kept_corr.begin(), kept_corr.end(), e.id)) push(make_row(e), e);
  }
  if (consume) consume->release_all();
  return f;
}

CorrIndex::CorrIndex(const std::vector<HtaRow>& rows, bool gpu) {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].gpu() == gpu && rows[i].corr != 0) {
      entries_.push_back({rows[i].corr, static_cast<uint32_t>(i)});
    }
  }
  std::stable_sort(entries_.begin(), entries_.end(),
                   [](const Entry& a, const Entry& b) { return a.corr < b.corr; });
}

std::pair<const CorrIndex::Entry*, const CorrIndex::Entry*> CorrIndex::find(uint64_t corr) const {
  const auto lo = std::lower_bound(entries_.begin(), entries_.end(), corr,
                                   [](const Entry& e, uint64_t c) { return e.corr < c; });
  auto hi = lo;
  while (hi != entries_.end() && hi->corr == corr) ++hi;
  return {entries_.data() + (lo - entries_.begin()), entries_.data() + (hi - entries_.begin())};
}

}  // namespace ft::profiler::kineto
