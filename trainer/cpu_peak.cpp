// cpu_peak.cpp: MFU peaks of the CPU kinds ft was measured on, and an FMA probe for the others.
// GCC 12 reports a false -Wmaybe-uninitialized inside its own AVX-512 intrinsic headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "ft/trainer/cpu_peak.h"

#include <fmt/format.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace ft::trainer {
namespace {

// bench/fma_peak, 1 and 2 threads (per-core figures scale linearly to 2 cores on both). The
// highest of the runs: the Zen 5 VM's clock moves by ~10% between phases (fp32 235 to 268).
// Zen 4 executes 512-bit FMAs on a 256-bit datapath, so half Zen 5's rate per cycle (two runs,
// 2026-12-02: fp32 117.3 / 117.3, bf16 234.4 / 234.5 per core, 2 threads twice that).
constexpr KnownCpu kIntelAmx{"Intel Xeon with AMX", 178.0, 2300.0, "AMX bf16 tile"};
constexpr KnownCpu kZen5{"AMD Zen 5 (family 26)", 268.0, 534.0, "AVX512-BF16 dot-product"};
constexpr KnownCpu kZen4{"AMD Zen 4 (family 25)", 117.4, 234.5, "AVX512-BF16 dot-product"};

#if defined(__AVX512F__)
using Vec = __m512;
constexpr double kFlopsPerFma = 32.0;  // 16 lanes x (multiply + add)
inline Vec vset(float x) { return _mm512_set1_ps(x); }
inline Vec vfma(Vec acc, Vec a, Vec b) { return _mm512_fmadd_ps(acc, a, b); }
inline float vfirst(Vec v) { return _mm512_cvtss_f32(v); }
#elif defined(__FMA__)
using Vec = __m256;
constexpr double kFlopsPerFma = 16.0;
inline Vec vset(float x) { return _mm256_set1_ps(x); }
inline Vec vfma(Vec acc, Vec a, Vec b) { return _mm256_fmadd_ps(acc, a, b); }
inline float vfirst(Vec v) { return _mm256_cvtss_f32(v); }
#endif

#if defined(__AVX512F__) || defined(__FMA__)
// `iters` rounds of `step` on kFmaChains independent accumulators; depends on all of them.
template <typename Step>
inline float run_chains(int64_t iters, float seed, Step step) {
  Vec acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = vset(seed + static_cast<float>(i));
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kFmaChains; ++i) acc[i] = step(acc[i]);
  }
  float s = 0;
  for (int i = 0; i < kFmaChains; ++i) s += vfirst(acc[i]);
  return s;
}
#endif

}  // namespace

const KnownCpu* known_cpu(const EnvInfo& env) {
  if (env.amx_bf16 && env.vendor == "GenuineIntel") return &kIntelAmx;
  if (env.vendor == "AuthenticAMD" && env.cpu_family == 26 && env.avx512_bf16) return &kZen5;
  // Family 25 is Zen 3 and Zen 4; only Zen 4 has AVX-512 (and its BF16 extension).
  if (env.vendor == "AuthenticAMD" && env.cpu_family == 25 && env.avx512_bf16) return &kZen4;
  return nullptr;
}

bool fma_chains_bf16() {
#if defined(__AVX512BF16__)
  return true;
#else
  return false;
#endif
}

double fma_chain_flops(bool bf16) {
#if defined(__AVX512F__) || defined(__FMA__)
  // VDPBF16PS does twice the flops of an FMA per instruction (pairs of bf16 products).
  return bf16 && fma_chains_bf16() ? 2 * kFlopsPerFma : kFlopsPerFma;
#else
  (void)bf16;
  return 0.0;
#endif
}

__attribute__((noinline)) float fma_chains(int64_t iters, float seed, bool bf16) {
#if defined(__AVX512BF16__)
  if (bf16) {
    const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
    return run_chains(iters, seed, [a](Vec x) { return _mm512_dpbf16_ps(x, a, a); });
  }
#else
  (void)bf16;
#endif
#if defined(__AVX512F__) || defined(__FMA__)
  const Vec a = vset(0.999999f), b = vset(1e-7f);
  return run_chains(iters, seed, [a, b](Vec x) { return vfma(x, a, b); });
#else
  (void)iters;
  return seed;
#endif
}

double probe_fma_gflops_per_core(bool bf16, double seconds) {
  const double flops_per_insn = fma_chain_flops(bf16);
  if (flops_per_insn == 0) return 0.0;
  using Clock = std::chrono::steady_clock;
  volatile float sink = 0;
  int64_t iters = 1 << 14;
  double best = 0, spent = 0;
  // Grow the loop until one run takes >= 1/8 of the budget, then keep the best of the runs.
  while (spent < seconds) {
    const auto t0 = Clock::now();
    sink = sink + fma_chains(iters, 1.0f, bf16);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    spent += s;
    if (s > 0)
      best = std::max(best, static_cast<double>(iters) * kFmaChains * flops_per_insn / s / 1e9);
    if (s < seconds / 8) iters *= 2;
  }
  return best;
}

CpuPeak cpu_peak(Precision p, int threads, const EnvInfo& env) {
  const bool bf16 = p == Precision::kBf16;
  CpuPeak peak;
  if (const KnownCpu* cpu = known_cpu(env)) {
    peak.gflops = (bf16 ? cpu->bf16_per_core : cpu->fp32_per_core) * threads;
    peak.source = fmt::format("{} peak x {} threads, {}, measured by bench/fma_peak",
                              bf16 ? cpu->bf16_unit : "AVX-512 fp32 FMA", threads, cpu->name);
    return peak;
  }
  const bool dp = bf16 && env.avx512_bf16;
  peak.gflops = probe_fma_gflops_per_core(dp) * threads;
  peak.source = fmt::format(
      "{} peak of one core probed at start-up x {} threads (CPU '{}' not in ft's table)",
      dp ? "AVX512-BF16 dot-product" : "fp32 FMA", threads, env.cpu_model);
  return peak;
}

}  // namespace ft::trainer
