// fma_peak: measures the CPU's fp32 FMA (AVX-512 or AVX2), bf16 VDPBF16PS and AMX TDPBF16PS peak
// GFLOP/s on N OpenMP threads (units the CPU lacks print null).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "ft/core/cpu_peak.h"

namespace {

// The same loops that ft-train's start-up probe times (ft/core/cpu_peak.h), on every thread.

struct Result {
  double best_gflops = 0.0;  // total flops / wall time of the parallel region
  double median_gflops = 0.0;
  double best_cpu_gflops = 0.0;  // sum over threads of flops / that thread's CPU time
  double sink = 0.0;
};

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Times `loop` on `threads` threads `reps` times; flops = threads * iters *
// flops_per_iter. The CPU-time figure ignores time a thread spent descheduled (a busy shared
// machine), but not time lost to a sibling hyperthread: wall ~ CPU-time figure means the threads
// ran undisturbed.
template <typename Loop>
Result Measure(Loop loop, int threads, int64_t iters, int reps, double flops_per_iter) {
  std::vector<double> gflops;
  double sink = 0.0, best_cpu = 0.0;
  const double thread_flops = static_cast<double>(iters) * flops_per_iter;
  loop(iters / 10, 1.0f);  // warm-up: wake the cores and the AVX-512 license.
  for (int r = 0; r < reps; ++r) {
    double rep_sink = 0.0, cpu_gflops = 0.0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : rep_sink, cpu_gflops)
    {
      const double c0 = ThreadCpuSeconds();
      rep_sink += loop(iters, static_cast<float>(omp_get_thread_num()));
      cpu_gflops += thread_flops / (ThreadCpuSeconds() - c0) * 1e-9;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink += rep_sink;
    best_cpu = std::max(best_cpu, cpu_gflops);
    gflops.push_back(static_cast<double>(threads) * thread_flops / s * 1e-9);
  }
  std::sort(gflops.begin(), gflops.end());
  return {gflops.back(), gflops[gflops.size() / 2], best_cpu, sink};
}

void Usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--threads N] [--iters N] [--reps N]\n", argv0);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = omp_get_max_threads();
  int64_t iters = 50'000'000;  // ~0.1-0.3 s per rep at a few GHz.
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) Usage(argv[0]);
    if (arg == "--threads") {
      threads = std::atoi(argv[++i]);
    } else if (arg == "--iters") {
      iters = std::atoll(argv[++i]);
    } else if (arg == "--reps") {
      reps = std::atoi(argv[++i]);
    } else {
      Usage(argv[0]);
    }
  }
  if (threads < 1 || iters < 10 || reps < 1) Usage(argv[0]);

  const ft::EnvInfo env = ft::collect_env_info();
  std::printf("{\"bench\":\"fma_peak\",\"threads\":%d,\"iters\":%lld,\"reps\":%d,", threads,
              static_cast<long long>(iters), reps);
  double sink = 0, fp32_best = 0;
  const struct {
    ft::PeakUnit unit;
    const char* key;
    int64_t iters_div;  // an AMX instruction does 256x the work of an FMA
  } units[] = {{ft::PeakUnit::kFp32Fma, "fp32_fma", 1},
               {ft::PeakUnit::kBf16Dot, "bf16_dp", 1},
               {ft::PeakUnit::kAmxBf16, "amx_bf16", 16}};
  for (const auto& u : units) {
    if (!ft::unit_available(u.unit, env)) {
      std::printf("\"%s_gflops\":null,", u.key);
      continue;
    }
    const auto loop = [&](int64_t n, float seed) { return ft::fma_chains(n, seed, u.unit, env); };
    const Result r = Measure(loop, threads, iters / u.iters_div, reps,
                             ft::chain_flops_per_iter(u.unit, env));
    std::printf("\"%s_gflops\":%.1f,\"%s_gflops_median\":%.1f,\"%s_gflops_cpu_time\":%.1f,",
                u.key, r.best_gflops, u.key, r.median_gflops, u.key, r.best_cpu_gflops);
    if (u.unit == ft::PeakUnit::kFp32Fma) fp32_best = r.best_gflops;
    sink += r.sink;
  }
  std::printf("\"per_thread_fp32_gflops\":%.1f,\"sink\":%g}\n", fp32_best / threads, sink);
  return 0;
}
