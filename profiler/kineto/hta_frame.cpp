// hta_frame.cpp: HTA's loading rules applied to an imported Trace.
#include "hta_frame.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

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
  // Kernel types are a function of the name: classify each distinct name once.
  std::vector<int8_t> type_of(trace.names.size(), -1);
  std::vector<int64_t> step_starts;
  for (const Event& e : trace.events) {
    if (e.phase != Phase::kSpan || (e.flags & kNoSourceCategory)) continue;
    HtaRow r;
    // HTA works on the JSON's float µs: ts = ceil(ts), end = floor(ts + dur). ts_ns / 1000.0
    // is the same double the JSON text parses to (see micros_double).
    const double ts = micros_double(e.ts_ns);
    const double dur = micros_double(e.dur_ns);
    r.ts = static_cast<int64_t>(std::ceil(ts));
    r.dur = static_cast<int64_t>(std::floor(ts + dur)) - r.ts;
    r.stream = e.track.device && !(e.flags & kNoStream) ? static_cast<int64_t>(e.track.tid) : -1;
    r.corr = e.id;
    r.name = e.name;
    r.sync = e.category == Category::kSync && e.track.device;
    if (type_of[e.name] < 0) {
      type_of[e.name] = static_cast<int8_t>(hta_kernel_type(trace.names.at(e.name)));
    }
    r.type = static_cast<HtaKernelType>(type_of[e.name]);
    if (trace.names.at(e.name).rfind("ProfilerStep#", 0) == 0) step_starts.push_back(r.ts);
    f.rows.push_back(r);
  }
  // With two or more ProfilerSteps HTA keeps CPU events that start before the last step and
  // the GPU events correlated with a kept CPU event.
  if (step_starts.size() >= 2) {
    const int64_t last = *std::max_element(step_starts.begin(), step_starts.end());
    std::unordered_set<uint64_t> kept_corr;
    for (const HtaRow& r : f.rows) {
      if (!r.gpu() && r.ts < last && r.corr != 0) kept_corr.insert(r.corr);
    }
    std::vector<HtaRow> cpu, gpu;
    for (const HtaRow& r : f.rows) {
      if (!r.gpu()) {
        if (r.ts < last) cpu.push_back(r);
      } else if (r.corr != 0 && kept_corr.count(r.corr)) {
        gpu.push_back(r);
      }
    }
    f.rows = std::move(cpu);
    f.rows.insert(f.rows.end(), gpu.begin(), gpu.end());
  }
  return f;
}

}  // namespace ft::profiler::kineto
