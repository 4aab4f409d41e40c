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
  size_t n = 0;
  for (const Event& e : trace.events) {
    n += e.phase == Phase::kSpan && !(e.flags & kNoSourceCategory);
  }
  f.rows.reserve(n);
  int64_t last_step = INT64_MIN;
  size_t steps = 0;
  for (const Event& e : trace.events) {
    if (e.phase != Phase::kSpan || (e.flags & kNoSourceCategory)) continue;
    HtaRow r;
    // HTA works on the JSON's float µs: ts = ceil(ts), end = floor(ts + dur), computed on the
    // same doubles the JSON text parses to (see micros_double).
    const double ts = micros_double(e.ts_ns);
    const double dur = micros_double(e.dur_ns);
    r.ts = static_cast<int64_t>(std::ceil(ts));
    r.dur = static_cast<int64_t>(std::floor(ts + dur)) - r.ts;
    r.stream = e.track.device && !(e.flags & kNoStream) ? static_cast<int64_t>(e.track.tid) : -1;
    r.corr = e.id;
    r.name = e.name;
    r.sync = e.category == Category::kSync && e.track.device;
    if (type_of[e.name] < 0) {
      const std::string& name = trace.names.at(e.name);
      type_of[e.name] = static_cast<int8_t>(hta_kernel_type(name));
      is_step[e.name] = name.rfind("ProfilerStep#", 0) == 0 ? 1 : 0;
    }
    r.type = static_cast<HtaKernelType>(type_of[e.name]);
    if (is_step[e.name]) {
      ++steps;
      last_step = std::max(last_step, r.ts);
    }
    f.rows.push_back(r);
  }
  // With two or more ProfilerSteps HTA keeps CPU events that start before the last step and
  // the GPU events correlated with a kept CPU event (CPU rows first, then GPU rows).
  if (steps >= 2) {
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
