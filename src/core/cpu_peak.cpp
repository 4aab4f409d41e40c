// cpu_peak.cpp: FMA / VDPBF16PS / AMX throughput loops, dispatched at run time, and the cached
// per-core probe that gives MFU its peak.
// GCC 12 reports a false -Wmaybe-uninitialized inside its own AVX-512 intrinsic headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "ft/core/cpu_peak.h"

#include <fmt/format.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

#include <nlohmann/json.hpp>

#include "ft/core/atomic_file.h"

namespace ft {
namespace {

// kFmaChains independent accumulators, each stepped `iters` times; the sum depends on all.
#define FT_CHAIN_LOOP(Vec, set1, step, first)                          \
  Vec acc[kFmaChains];                                                 \
  for (int i = 0; i < kFmaChains; ++i) acc[i] = set1(seed + i);        \
  for (int64_t it = 0; it < iters; ++it) {                             \
    _Pragma("GCC unroll 16") for (int i = 0; i < kFmaChains; ++i) {    \
      acc[i] = step;                                                   \
    }                                                                  \
  }                                                                    \
  float s = 0;                                                         \
  for (int i = 0; i < kFmaChains; ++i) s += first(acc[i]);             \
  return s;

__attribute__((target("avx512f"), noinline)) float fp32_avx512(int64_t iters, float seed) {
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  FT_CHAIN_LOOP(__m512, _mm512_set1_ps, _mm512_fmadd_ps(acc[i], a, b), _mm512_cvtss_f32)
}

__attribute__((target("avx2,fma"), noinline)) float fp32_avx2(int64_t iters, float seed) {
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  FT_CHAIN_LOOP(__m256, _mm256_set1_ps, _mm256_fmadd_ps(acc[i], a, b), _mm256_cvtss_f32)
}

__attribute__((target("avx512f,avx512bf16"), noinline)) float bf16_dot(int64_t iters, float seed) {
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  FT_CHAIN_LOOP(__m512, _mm512_set1_ps, _mm512_dpbf16_ps(acc[i], a, a), _mm512_cvtss_f32)
}
#undef FT_CHAIN_LOOP

// AMX: 4 independent 16x16 fp32 accumulator tiles; one TDPBF16PS does C (16x16) += A (16x32
// bf16) . B (32x16 bf16) = 16384 flops. One iteration is 4 x 4 = kFmaChains instructions.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
constexpr double kAmxFlopsPerInsn = 16.0 * 16 * 32 * 2;

__attribute__((target("amx-tile,amx-bf16"), noinline)) float amx_bf16(int64_t iters, float seed) {
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

// Linux hands out the AMX tile state only on request (once per process).
bool amx_permitted() {
  static const bool ok = [] {
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

std::string cache_key(PeakUnit u, const EnvInfo& env) {
  return fmt::format("{} | family {} model {} | avx2 {} avx512f {} avx512_bf16 {} amx_bf16 {} | {}",
                     env.cpu_model, env.cpu_family, env.cpu_model_number, env.avx2, env.avx512f,
                     env.avx512_bf16, env.amx_bf16, peak_unit_name(u));
}

nlohmann::json read_cache(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return nlohmann::json::object();
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : nlohmann::json::object();
}

}  // namespace

const char* peak_unit_name(PeakUnit u) {
  switch (u) {
    case PeakUnit::kFp32Fma: return "fp32 FMA";
    case PeakUnit::kBf16Dot: return "AVX512-BF16 dot product";
    case PeakUnit::kAmxBf16: return "AMX bf16 tiles";
  }
  return "?";
}

bool unit_available(PeakUnit u, const EnvInfo& env) {
  switch (u) {
    case PeakUnit::kFp32Fma: return env.avx512f || env.avx2;
    case PeakUnit::kBf16Dot: return env.avx512f && env.avx512_bf16;
    case PeakUnit::kAmxBf16: return env.amx_bf16 && amx_permitted();
  }
  return false;
}

PeakUnit gemm_unit(bool bf16, const EnvInfo& env) {
  if (bf16 && unit_available(PeakUnit::kAmxBf16, env)) return PeakUnit::kAmxBf16;
  if (bf16 && unit_available(PeakUnit::kBf16Dot, env)) return PeakUnit::kBf16Dot;
  return PeakUnit::kFp32Fma;
}

double chain_flops_per_iter(PeakUnit u, const EnvInfo& env) {
  if (!unit_available(u, env)) return 0;
  switch (u) {
    case PeakUnit::kFp32Fma: return kFmaChains * (env.avx512f ? 32.0 : 16.0);
    case PeakUnit::kBf16Dot: return kFmaChains * 64.0;  // pairs of bf16 products per lane
    case PeakUnit::kAmxBf16: return kFmaChains * kAmxFlopsPerInsn;
  }
  return 0;
}

float fma_chains(int64_t iters, float seed, PeakUnit u, const EnvInfo& env) {
  if (unit_available(u, env)) {
    if (u == PeakUnit::kAmxBf16) return amx_bf16(iters, seed);
    if (u == PeakUnit::kBf16Dot) return bf16_dot(iters, seed);
  }
  if (env.avx512f) return fp32_avx512(iters, seed);
  if (env.avx2) return fp32_avx2(iters, seed);
  return seed;
}

double probe_gflops_per_core(PeakUnit u, const EnvInfo& env, int reps, double seconds) {
  const double flops = chain_flops_per_iter(u, env);
  if (flops == 0) return 0;
  // Timed on this thread's CPU clock, not the wall clock: time the thread spends descheduled
  // (other processes on a busy machine) does not count, so a loaded machine reads its peak too.
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  volatile float sink = 0;
  // Size one repetition to about `seconds` of CPU time (the first runs also warm the unit up).
  int64_t iters = 1 << 10;
  for (;;) {
    const double t0 = cpu_now();
    sink = sink + fma_chains(iters, 1.0f, u, env);
    if (cpu_now() - t0 >= seconds / 2 || iters > (int64_t{1} << 40)) break;
    iters *= 2;
  }
  double best = 0;
  for (int r = 0; r < std::max(1, reps); ++r) {
    const double t0 = cpu_now();
    sink = sink + fma_chains(iters, 1.0f + static_cast<float>(r), u, env);
    const double s = cpu_now() - t0;
    if (s > 0) best = std::max(best, static_cast<double>(iters) * flops / s / 1e9);
  }
  return best;
}

std::filesystem::path default_peak_cache() {
  if (const char* d = std::getenv("FT_CACHE_DIR"); d && *d) {
    if (std::string(d) == "off") return {};
    return std::filesystem::path(d) / "cpu_peak.json";
  }
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::filesystem::path(x) / "ft" / "cpu_peak.json";
  if (const char* h = std::getenv("HOME"); h && *h)
    return std::filesystem::path(h) / ".cache" / "ft" / "cpu_peak.json";
  return {};
}

CpuPeak measure_cpu_peak(bool bf16, int threads, const EnvInfo& env,
                         const std::filesystem::path& cache_file) {
  static std::mutex mu;  // one probe at a time in a process (the cache is read-modify-write)
  static std::map<std::string, double> probed;  // this process's probes, by cache key
  std::lock_guard<std::mutex> lock(mu);
  CpuPeak peak;
  peak.unit = gemm_unit(bf16, env);
  const std::string key = cache_key(peak.unit, env);
  nlohmann::json cache = cache_file.empty() ? nlohmann::json::object() : read_cache(cache_file);
  const nlohmann::json* hit = cache.contains(key) ? &cache[key] : nullptr;
  if (hit && hit->is_object() && hit->contains("gflops_per_core") &&
      (*hit)["gflops_per_core"].is_number() && (*hit)["gflops_per_core"].get<double>() > 0) {
    peak.per_core = (*hit)["gflops_per_core"].get<double>();
    peak.cached = true;
  } else {
    auto it = probed.find(key);
    peak.per_core = it != probed.end() ? it->second : probe_gflops_per_core(peak.unit, env);
    probed[key] = peak.per_core;
    if (!cache_file.empty() && peak.per_core > 0) {
      cache[key] = {{"gflops_per_core", peak.per_core}, {"unit", peak_unit_name(peak.unit)}};
      try {
        std::filesystem::create_directories(cache_file.parent_path());
        write_file_atomic(cache_file, cache.dump(2) + "\n");
      } catch (const std::exception&) {
        // An unwritable cache costs a probe in the next process; nothing else.
      }
    }
  }
  const int n = std::max(1, threads);
  peak.gflops = peak.per_core * n;
  peak.source = peak.cached ? fmt::format("{} of one core x {} threads, probed on this CPU "
                                          "earlier (cached in {})",
                                          peak_unit_name(peak.unit), n, cache_file.string())
                            : fmt::format("{} of one core x {} threads, probed at start-up",
                                          peak_unit_name(peak.unit), n);
  return peak;
}

}  // namespace ft
