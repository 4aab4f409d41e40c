// profiler_overhead.cpp: step time with the profiler on against off, alternating in one run.
//
// Usage: profiler_overhead [--pairs N] [any ft-train option]
// Builds one Trainer and runs warm-up steps, then N pairs of steps, one profiled (host tracer
// installed, recorder started, step observer set) and one not (no range sink at all), in
// ABBA order so that slow drifts cancel. Prints the median of the per-pair overhead
// (on - off) / off, the medians of both step times, and the trace bytes per profiled step.
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ft/core/annotate.h"
#include "ft/core/error.h"
#include "ft/profiler/session.h"
#include "ft/profiler/trace_writer.h"
#include "ft/trainer/trainer.h"

namespace {

int64_t thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int run(int argc, char** argv) {
  int pairs = 30, warmup = 4;
  std::vector<const char*> args = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--pairs") == 0 && i + 1 < argc) {
      pairs = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--warmup-steps") == 0 && i + 1 < argc) {
      warmup = std::atoi(argv[++i]);
    } else {
      args.push_back(argv[i]);
    }
  }
  if (pairs < 1) throw ft::ConfigError("--pairs must be >= 1");
  auto parsed = ft::trainer::parse_train_args(static_cast<int>(args.size()), args.data(),
                                              "profiler_overhead");
  if (!parsed) return 0;
  ft::trainer::TrainConfig c = *parsed;
  c.steps = warmup + 2 * pairs;
  c.warmup = std::max(c.warmup, c.steps);  // a gentle LR ramp: no divergence mid-benchmark
  ft::trainer::Trainer t(c);

  ft::profiler::SessionOptions so;
  so.quiet = true;
  so.device_activity = false;  // host cost only (no GPU here)
  ft::profiler::Session session(so);
  session.start();
  auto* observer = session.observer();
  auto& tracer = *static_cast<ft::profiler::HostTracer*>(observer);
  tracer.uninstall();  // start() installed it; it is toggled per step below

  auto step = [&](bool on) {
    if (on) {
      tracer.install();
      t.set_observer(observer);
    }
    const double ms = t.step().step_ms;
    if (on) {
      t.set_observer(nullptr);
      tracer.uninstall();
    }
    return ms;
  };
  for (int i = 0; i < warmup; ++i) step(i % 2 == 1);

  std::vector<double> on_ms, off_ms, ratio;
  for (int p = 0; p < pairs; ++p) {
    double on = 0, off = 0;
    if (p % 2 == 0) {
      on = step(true);
      off = step(false);
    } else {
      off = step(false);
      on = step(true);
    }
    on_ms.push_back(on);
    off_ms.push_back(off);
    ratio.push_back((on - off) / off);
  }
  ft::profiler::Trace trace = session.collect();
  size_t steps = 0;
  for (const auto& e : trace.events) steps += e.category == ft::profiler::Category::kStep;
  const auto path = std::filesystem::temp_directory_path() /
                    fmt::format("ft_profiler_overhead_{}.json", static_cast<long>(::getpid()));
  const uint64_t bytes = ft::profiler::write_trace_json(trace, path);
  std::filesystem::remove(path);
  std::vector<double> sorted = ratio;
  std::sort(sorted.begin(), sorted.end());
  fmt::print("profiler overhead: {} pairs (ABBA), median step {:.2f} ms off, {:.2f} ms on\n", pairs,
             median(off_ms), median(on_ms));
  fmt::print("  median per-pair overhead {:+.2f}% (quartiles {:+.2f}% .. {:+.2f}%)\n",
             100 * median(ratio), 100 * sorted[sorted.size() / 4],
             100 * sorted[(3 * sorted.size()) / 4]);
  fmt::print(
      "  trace: {} events over {} profiled steps ({:.0f} events/step), {} bytes = {:.0f} "
      "bytes/step, {} dropped\n",
      trace.events.size(), steps, steps ? double(trace.events.size()) / steps : 0.0, bytes,
      steps ? double(bytes) / steps : 0.0, trace.dropped_events);
  // The cost of one FT_RANGE scope, recorded against not: explains the step-level number.
  {
    ft::profiler::RecorderOptions ro;
    ro.events_per_thread = 4096;  // wraps: the steady state of a long run
    ft::profiler::Recorder rec(ro);
    ft::profiler::HostTracer ht(rec);
    rec.start();
    rec.set_step(0);
    constexpr int kRanges = 200000;
    auto time_ranges = [&](bool on) {
      if (on) ht.install();
      // Thread CPU time: on a shared machine wall time would count time spent descheduled.
      const int64_t t0 = thread_cpu_ns();
      for (int i = 0; i < kRanges; ++i) {
        FT_RANGE("bench.range", ft::RangeKind::kCompute, i);
      }
      const int64_t t1 = thread_cpu_ns();
      if (on) ht.uninstall();
      return double(t1 - t0) / kRanges;
    };
    std::vector<double> on_ns, off_ns;
    for (int r = 0; r < 7; ++r) {
      off_ns.push_back(time_ranges(false));
      on_ns.push_back(time_ranges(true));
    }
    const double per_range = median(on_ns) - median(off_ns);
    const double events_per_step = steps ? double(trace.events.size()) / steps : 0.0;
    fmt::print(
        "  one range (thread CPU time): {:.1f} ns recorded, {:.1f} ns without a sink (median of 7 "
        "x {}); "
        "{:.0f} events/step x {:.1f} ns = {:.4f}% of a {:.2f} ms step\n",
        median(on_ns), median(off_ns), kRanges, events_per_step, per_range,
        100 * events_per_step * per_range * 1e-6 / median(off_ms), median(off_ms));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const ft::Error& e) {
    fmt::print(stderr, "profiler_overhead: error: {}\n", e.what());
    return 2;
  }
}
