// cpu_peak.h: the CPU's peak GFLOP/s that MFU is measured against: a table of measured CPUs, else a
// start-up probe.
#pragma once

#include <cstdint>
#include <string>

#include "ft/core/env_info.h"
#include "ft/trainer/precision.h"

namespace ft::trainer {

// Per-core peaks of one CPU kind, measured with bench/fma_peak (docs/benchmarks.md, "Peaks").
struct KnownCpu {
  const char* name;       // e.g. "AMD Zen 5 (family 26)"
  double fp32_per_core;   // AVX-512 FMA GFLOP/s (fp32 and fp16, which runs fp32 GEMMs)
  double bf16_per_core;   // the unit oneDNN's bf16 GEMMs use on it
  const char* bf16_unit;  // "AMX bf16 tile" / "AVX512-BF16 dot-product"
};

// The table entry for this CPU, or nullptr when its kind was never measured.
const KnownCpu* known_cpu(const EnvInfo& env);

// The FMA loop that both the probe below and bench/fma_peak time: `iters` rounds of kFmaChains
// independent fp32 FMAs (AVX-512, else AVX2), or VDPBF16PS when `bf16` and fma_chains_bf16();
// the result depends on every accumulator. fma_chain_flops: flops of one such instruction (0
// without FMA units).
inline constexpr int kFmaChains = 16;  // 4-cycle latency x 2 FMA pipes x 2
float fma_chains(int64_t iters, float seed, bool bf16);
double fma_chain_flops(bool bf16);
bool fma_chains_bf16();  // built with VDPBF16PS

// One thread's FMA throughput (GFLOP/s) over about `seconds` of dependent-free chains: fp32
// AVX-512 (or AVX2) FMA, or VDPBF16PS when `bf16` and the CPU has it. 0 without FMA units.
double probe_fma_gflops_per_core(bool bf16, double seconds = 0.02);

struct CpuPeak {
  double gflops = 0;   // all threads together
  std::string source;  // what the figure is, for the header and reports
};

// The peak for `p` on `threads` cores: the table's figure times threads where the CPU is known,
// else a start-up probe of one core times threads (named as such in `source`).
CpuPeak cpu_peak(Precision p, int threads, const EnvInfo& env);

}  // namespace ft::trainer
