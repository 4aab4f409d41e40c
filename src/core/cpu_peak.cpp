// cpu_peak.cpp: FMA / VDPBF16PS / AMX throughput loops, dispatched at run time, and the cached
// per-core probe that gives MFU its peak.
// GCC 12 reports a false -Wmaybe-uninitialized inside its own AVX-512 intrinsic headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "ft/core/cpu_peak.h"

#include <fmt/format.h>
#include <immintrin.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "ft/core/atomic_file.h"

namespace ft {
namespace {

// kFmaChains independent accumulators, each stepped `iters` times; the sum depends on all.
#define FT_CHAIN_LOOP(Vec, set1, step, first)                                        \
  Vec acc[kFmaChains];                                                               \
  for (int i = 0; i < kFmaChains; ++i) acc[i] = set1(seed + i);                      \
  for (int64_t it = 0; it < iters; ++it) {                                           \
    _Pragma("GCC unroll 16") for (int i = 0; i < kFmaChains; ++i) { acc[i] = step; } \
  }                                                                                  \
  float s = 0;                                                                       \
  for (int i = 0; i < kFmaChains; ++i) s += first(acc[i]);                           \
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

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A cached positive figure under `key`/`field`, else 0.
double cached_figure(const nlohmann::json& cache, const std::string& key, const char* field) {
  if (!cache.contains(key) || !cache.at(key).is_object()) return 0;
  const nlohmann::json& hit = cache.at(key);
  if (!hit.contains(field) || !hit.at(field).is_number()) return 0;
  const double v = hit.at(field).get<double>();
  return v > 0 ? v : 0;
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
    case PeakUnit::kFp32Fma:
      return "fp32 FMA";
    case PeakUnit::kBf16Dot:
      return "AVX512-BF16 dot product";
    case PeakUnit::kAmxBf16:
      return "AMX bf16 tiles";
  }
  return "?";
}

bool unit_available(PeakUnit u, const EnvInfo& env) {
  switch (u) {
    case PeakUnit::kFp32Fma:
      return env.avx512f || env.avx2;
    case PeakUnit::kBf16Dot:
      return env.avx512f && env.avx512_bf16;
    case PeakUnit::kAmxBf16:
      return env.amx_bf16 && amx_permitted();
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
    case PeakUnit::kFp32Fma:
      return kFmaChains * (env.avx512f ? 32.0 : 16.0);
    case PeakUnit::kBf16Dot:
      return kFmaChains * 64.0;  // pairs of bf16 products per lane
    case PeakUnit::kAmxBf16:
      return kFmaChains * kAmxFlopsPerInsn;
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
  volatile float sink = 0;
  // Size one repetition to about `seconds` of CPU time (the first runs also warm the unit up).
  int64_t iters = 1 << 10;
  for (;;) {
    const double t0 = thread_cpu_seconds();
    sink = sink + fma_chains(iters, 1.0f, u, env);
    if (thread_cpu_seconds() - t0 >= seconds / 2 || iters > (int64_t{1} << 40)) break;
    iters *= 2;
  }
  double best = 0;
  for (int r = 0; r < std::max(1, reps); ++r) {
    const double t0 = thread_cpu_seconds();
    sink = sink + fma_chains(iters, 1.0f + static_cast<float>(r), u, env);
    const double s = thread_cpu_seconds() - t0;
    if (s > 0) best = std::max(best, static_cast<double>(iters) * flops / s / 1e9);
  }
  return best;
}

namespace {

// Pins the calling thread to the t-th online CPU (t modulo their count); a refusal (a cpuset
// that excludes it) leaves it on every online CPU, or as it was.
void pin_to_cpu(int t) {
  const int cpus = get_nprocs();
  if (cpus <= 0) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(t % cpus, &one);
  if (sched_setaffinity(0, sizeof(one), &one) == 0) return;
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c = 0; c < cpus && c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
  sched_setaffinity(0, sizeof(all), &all);
}

}  // namespace

ConcurrentProbe probe_gflops_concurrent(PeakUnit u, const EnvInfo& env, int threads,
                                        int clean_wanted, int max_reps, double seconds) {
  ConcurrentProbe out;
  const double flops = chain_flops_per_iter(u, env);
  const int n = std::max(1, threads);
  if (flops == 0) return out;
  // One repetition is about `seconds` of work per thread at one thread's rate.
  const double per_core = probe_gflops_per_core(u, env, 3, seconds);
  if (per_core <= 0) return out;
  const auto iters =
      std::max<int64_t>(1 << 10, static_cast<int64_t>(per_core * 1e9 * seconds / flops));
  struct Span {
    double wall0 = 0, wall1 = 0, cpu = 0;
    float sink = 0;
  };
  // The caller may be bound to one core (OMP_PROC_BIND binds the initial thread), and threads
  // inherit that: each probe thread is pinned to its own online CPU instead, and the caller's
  // mask is restored after each repetition.
  cpu_set_t caller;
  CPU_ZERO(&caller);
  const bool have_caller = sched_getaffinity(0, sizeof(caller), &caller) == 0;
  auto unpin = [&](const cpu_set_t& mask) {
    if (have_caller) sched_setaffinity(0, sizeof(mask), &mask);
  };
  for (int r = 0; r < std::max(1, max_reps) && out.clean_reps < clean_wanted; ++r) {
    std::vector<Span> spans(static_cast<size_t>(n));
    std::atomic<int> arrived{0};
    auto body = [&](int t) {
      pin_to_cpu(t);
      arrived.fetch_add(1);
      while (arrived.load() < n) std::this_thread::yield();  // start together
      Span& s = spans[static_cast<size_t>(t)];
      s.wall0 = wall_seconds();
      const double c0 = thread_cpu_seconds();
      s.sink = fma_chains(iters, 1.0f + static_cast<float>(t), u, env);
      s.cpu = thread_cpu_seconds() - c0;
      s.wall1 = wall_seconds();
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < n; ++t) pool.emplace_back(body, t);
    body(0);
    for (auto& th : pool) th.join();
    unpin(caller);
    ++out.reps;
    double first = spans[0].wall0, last = spans[0].wall1, latest_start = first, earliest_end = last;
    double rate = 0;
    bool ran = true;
    for (const Span& s : spans) {
      first = std::min(first, s.wall0);
      last = std::max(last, s.wall1);
      latest_start = std::max(latest_start, s.wall0);
      earliest_end = std::min(earliest_end, s.wall1);
      const double span = s.wall1 - s.wall0;
      ran = ran && s.cpu > 0 && span > 0 && s.cpu >= 0.9 * span;
      if (s.cpu > 0) rate += static_cast<double>(iters) * flops / s.cpu / 1e9;
    }
    if (!ran || earliest_end - latest_start < 0.9 * (last - first)) continue;
    ++out.clean_reps;
    out.gflops = std::max(out.gflops, rate);
  }
  return out;
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
  // More threads than logical CPUs add no peak.
  const int cpus = env.logical_cpus > 0 ? env.logical_cpus
                                        : static_cast<int>(std::thread::hardware_concurrency());
  const int n = std::max(1, cpus > 0 ? std::min(threads, cpus) : threads);
  const std::string key = cache_key(peak.unit, env);
  const std::string all_key = fmt::format("{} | {} threads together", key, n);
  nlohmann::json cache = cache_file.empty() ? nlohmann::json::object() : read_cache(cache_file);
  bool dirty = false;
  auto remember = [&](const std::string& k, const char* field, double v) {
    probed[k] = v;
    if (cache_file.empty() || v <= 0) return;
    cache[k] = {{field, v}, {"unit", peak_unit_name(peak.unit)}};
    dirty = true;
  };
  peak.per_core = cached_figure(cache, key, "gflops_per_core");
  peak.cached = peak.per_core > 0;
  if (!peak.cached) {
    auto it = probed.find(key);
    peak.per_core = it != probed.end() ? it->second : probe_gflops_per_core(peak.unit, env);
    remember(key, "gflops_per_core", peak.per_core);
  }
  const std::string where = peak.cached ? fmt::format("cached in {}", cache_file.string()) : "";
  if (n == 1) {
    peak.gflops = peak.per_core;
    peak.source =
        peak.cached ? fmt::format("{} of one core, probed on this CPU earlier ({})",
                                  peak_unit_name(peak.unit), where)
                    : fmt::format("{} of one core, probed at start-up", peak_unit_name(peak.unit));
  } else {
    double all = cached_figure(cache, all_key, "gflops");
    const bool all_cached = all > 0;
    if (!all_cached) {
      auto it = probed.find(all_key);
      if (it != probed.end()) {
        all = it->second;
      } else {
        const ConcurrentProbe c = probe_gflops_concurrent(peak.unit, env, n);
        all = c.gflops;
        remember(all_key, "gflops", all);  // a 0 (never clean) is kept for this process only
      }
    }
    if (all > 0) {
      // Side by side the threads can never beat n single threads; a noisy probe can read above.
      peak.gflops = std::min(all, peak.per_core * n);
      peak.source = fmt::format(
          "{} of {} threads running together, {}", peak_unit_name(peak.unit), n,
          all_cached ? fmt::format("probed on this CPU earlier (cached in {})", cache_file.string())
                     : std::string("probed at start-up"));
    } else {
      peak.gflops = peak.per_core * n;
      peak.source = fmt::format(
          "{} of one core x {} threads: the threads never ran side by side in the probe (a busy "
          "machine), so a shared unit would be counted {} times",
          peak_unit_name(peak.unit), n, n);
    }
  }
  if (dirty) {
    try {
      std::filesystem::create_directories(cache_file.parent_path());
      write_file_atomic(cache_file, cache.dump(2) + "\n");
    } catch (const std::exception&) {
      // An unwritable cache costs a probe in the next process; nothing else.
    }
  }
  return peak;
}

}  // namespace ft
