// cpu_peak.h: the CPU's peak GFLOP/s that MFU is measured against: a table of measured CPUs, else a
// start-up probe.
#pragma once

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
