// fma_peak: measures the CPU's fp32 AVX-512 FMA, bf16 VDPBF16PS and AMX TDPBF16PS peak GFLOP/s on N
// OpenMP threads.
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "ft/trainer/cpu_peak.h"

namespace {

// fp32 FMA and VDPBF16PS: the same loop that ft-train's start-up probe times
// (ft/trainer/cpu_peak.h).
constexpr int kChains = ft::trainer::kFmaChains;
float FmaLoop(int64_t iters, float seed) { return ft::trainer::fma_chains(iters, seed, false); }
float DpBf16Loop(int64_t iters, float seed) { return ft::trainer::fma_chains(iters, seed, true); }

#if defined(__AMX_BF16__) && defined(__AMX_TILE__)
// AMX: 4 independent 16x16 fp32 accumulator tiles, each TDPBF16PS does
// C (16x16) += A (16x32 bf16) . B (32x16 bf16) = 16*16*32*2 = 16384 flops.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

bool AmxPermitted() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// kChains is counted as 4 tiles x 4 unrolled = 16 instructions per iteration.
__attribute__((noinline)) float AmxLoop(int64_t iters, float seed) {
  TileConfig cfg;
  for (int t = 0; t < 6; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t ab[16 * 32];
  for (auto& x : ab) x = 0x3a83;  // ~1e-3 in bf16
  alignas(64) float c[16 * 16];
  for (auto& x : c) x = seed;
  _tile_loadd(0, c, 64);
  _tile_loadd(1, c, 64);
  _tile_loadd(2, c, 64);
  _tile_loadd(3, c, 64);
  _tile_loadd(4, ab, 64);
  _tile_loadd(5, ab, 64);
  for (int64_t it = 0; it < iters; ++it) {
    for (int u = 0; u < 4; ++u) {
      _tile_dpbf16ps(0, 4, 5);
      _tile_dpbf16ps(1, 4, 5);
      _tile_dpbf16ps(2, 4, 5);
      _tile_dpbf16ps(3, 4, 5);
    }
  }
  _tile_stored(0, c, 64);
  float s = 0;
  for (float x : c) s += x;
  _tile_release();
  return s;
}
#endif

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

// Times `loop` on `threads` threads `reps` times; flops = threads * iters * kChains *
// flops_per_insn. The CPU-time figure ignores time a thread spent descheduled (a busy shared
// machine), but not time lost to a sibling hyperthread: wall ~ CPU-time figure means the threads
// ran undisturbed.
template <typename Loop>
Result Measure(Loop loop, int threads, int64_t iters, int reps, double flops_per_insn) {
  std::vector<double> gflops;
  double sink = 0.0, best_cpu = 0.0;
  const double thread_flops = static_cast<double>(iters) * kChains * flops_per_insn;
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

  const Result fp32 = Measure(FmaLoop, threads, iters, reps, ft::trainer::fma_chain_flops(false));
  std::printf("{\"bench\":\"fma_peak\",\"threads\":%d,\"iters\":%lld,\"reps\":%d,", threads,
              static_cast<long long>(iters), reps);
  std::printf("\"fp32_fma_gflops\":%.1f,\"fp32_fma_gflops_median\":%.1f,", fp32.best_gflops,
              fp32.median_gflops);
  std::printf("\"fp32_fma_gflops_cpu_time\":%.1f,", fp32.best_cpu_gflops);
  double sink = fp32.sink;
  if (ft::trainer::fma_chains_bf16()) {
    const Result bf16 =
        Measure(DpBf16Loop, threads, iters, reps, ft::trainer::fma_chain_flops(true));
    std::printf("\"bf16_dp_gflops\":%.1f,\"bf16_dp_gflops_median\":%.1f,", bf16.best_gflops,
                bf16.median_gflops);
    std::printf("\"bf16_dp_gflops_cpu_time\":%.1f,", bf16.best_cpu_gflops);
    sink += bf16.sink;
  } else {
    std::printf("\"bf16_dp_gflops\":null,\"bf16_note\":\"built without AVX512_BF16\",");
  }
#if defined(__AMX_BF16__) && defined(__AMX_TILE__)
  if (AmxPermitted()) {
    const Result amx = Measure(AmxLoop, threads, iters / 16, reps, 16384.0);
    std::printf("\"amx_bf16_gflops\":%.1f,\"amx_bf16_gflops_median\":%.1f,", amx.best_gflops,
                amx.median_gflops);
    sink += amx.sink;
  } else {
    std::printf("\"amx_bf16_gflops\":null,\"amx_note\":\"kernel refused AMX tile data\",");
  }
#else
  std::printf("\"amx_bf16_gflops\":null,\"amx_note\":\"built without AMX\",");
#endif
  std::printf("\"per_thread_fp32_gflops\":%.1f,\"sink\":%g}\n", fp32.best_gflops / threads, sink);
  return 0;
}
