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

HtaFrame make_hta_frame(const Trace& trace) {
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
  auto rounded_ts = [](const Event& e) {
    // HTA works on the JSON's float µs: ts = ceil(ts), end = floor(ts + dur), computed on the
    // same doubles the JSON text parses to (see micros_double).
    return static_cast<int64_t>(std::ceil(micros_double(e.ts_ns)));
  };
  // Pass 1: the last ProfilerStep (HTA cuts the trace there when it has two or more).
  int64_t last_step = INT64_MIN;
  size_t steps = 0, n = 0;
  for (const Event& e : trace.events) {
    if (!kept(e)) continue;
    ++n;
    classify(e.name);
    if (is_step[e.name]) {
      ++steps;
      last_step = std::max(last_step, rounded_ts(e));
    }
  }
  const bool cut = steps >= 2;
  // Pass 2: rows. CPU rows without a correlation id take part in no analysis; they are only
  // counted (HTA's events_after_load_filter), which keeps the frame to launches and GPU work.
  f.rows.reserve(n);
  for (const Event& e : trace.events) {
    if (!kept(e)) continue;
    HtaRow r;
    r.ts = rounded_ts(e);
    r.dur =
        static_cast<int64_t>(std::floor(micros_double(e.ts_ns) + micros_double(e.dur_ns))) - r.ts;
    r.stream = e.track.device && !(e.flags & kNoStream) ? static_cast<int64_t>(e.track.tid) : -1;
    r.corr = e.id;
    if (!r.gpu() && r.corr == 0) {
      f.uncorrelated_cpu_rows += !cut || r.ts < last_step;
      continue;
    }
    r.name = e.name;
    r.sync = e.category == Category::kSync && e.track.device;
    r.type = static_cast<HtaKernelType>(type_of[e.name]);
    f.rows.push_back(r);
  }
  // The cut keeps CPU rows that start before the last step and the GPU rows correlated with a
  // kept CPU row, CPU rows first.
  if (cut) {
    std::vector<uint64_t> kept_corr;
    for (const HtaRow& r : f.rows) {
      if (!r.gpu() && r.ts < last_step && r.corr != 0) kept_corr.push_back(r.corr);
    }
    std::sort(kept_corr.begin(), kept_corr.end());
    auto keep = [&](const HtaRow& r) {
      if (!r.gpu()) return r.ts < last_step;
      return r.corr != 0 && std::binary_search(kept_corr.begin(), kept_corr.end(), r.corr);
    };
    auto end =
        std::remove_if(f.rows.begin(), f.rows.end(), [&](const HtaRow& r) { return !keep(r); });
    f.rows.erase(end, f.rows.end());
    std::stable_partition(f.rows.begin(), f.rows.end(), [](const HtaRow& r) { return !r.gpu(); });
  }
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
