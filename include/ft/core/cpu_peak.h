// cpu_peak.h: the CPU peak GFLOP/s that MFU is measured against, measured on the running machine.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "ft/core/env_info.h"

namespace ft {

// The unit a step's GEMMs run on, and so the instruction whose throughput is the peak:
// fp32 FMA (AVX-512, else AVX2), the AVX512-BF16 dot product (VDPBF16PS), or AMX bf16 tiles
// (TDPBF16PS). Every loop runs kFmaChains independent accumulators.
enum class PeakUnit : uint8_t { kFp32Fma, kBf16Dot, kAmxBf16 };
const char* peak_unit_name(PeakUnit u);  // "fp32 FMA (AVX-512)", "AVX512-BF16 dot product", ...

inline constexpr int kFmaChains = 16;  // 4-cycle latency x 2 FMA pipes x 2

// The unit oneDNN / ft's GEMMs use for bf16 (`bf16`) or fp32/fp16 operands on this CPU: AMX
// when the CPU has it and the kernel grants the tile state, else VDPBF16PS, else fp32 FMA.
PeakUnit gemm_unit(bool bf16, const EnvInfo& env);
// Whether this CPU (and kernel) can run `u`; the loops below run only such units.
bool unit_available(PeakUnit u, const EnvInfo& env);
// Flops one loop iteration does (kFmaChains instructions); 0 when `u` is not available.
double chain_flops_per_iter(PeakUnit u, const EnvInfo& env);
// `iters` iterations of the loop for `u`; the result depends on every accumulator. Runs the
// fp32 loop when `u` is not available.
float fma_chains(int64_t iters, float seed, PeakUnit u, const EnvInfo& env);

// One thread's throughput of `u` (GFLOP/s per second of its CPU time, so descheduling by other
// load does not count): the best of `reps` repetitions of about `seconds`. 0 if unavailable.
double probe_gflops_per_core(PeakUnit u, const EnvInfo& env, int reps = 5, double seconds = 0.01);

// All `threads` threads running the loop for `u` at once: some units are shared between
// threads (AMX between the two hyperthreads of a core, a VM's vCPUs on one core), so one core's
// figure times the thread count can overstate the machine. Each repetition starts the threads
// together and records each one's wall span and CPU time; a repetition is clean when every
// thread ran for at least 90% of its span and the spans overlap by at least 90%, so that all
// threads really ran side by side. The figure is the best clean repetition's sum of the
// threads' rates (flops / own CPU time).
struct ConcurrentProbe {
  double gflops = 0;   // best clean repetition, all threads together; 0 when none was clean
  int clean_reps = 0;  // repetitions that met the side-by-side test
  int reps = 0;        // repetitions run
};
ConcurrentProbe probe_gflops_concurrent(PeakUnit u, const EnvInfo& env, int threads,
                                        int clean_wanted = 5, int max_reps = 15,
                                        double seconds = 0.01);

struct CpuPeak {
  double gflops = 0;    // all threads together
  double per_core = 0;  // measured on one core
  PeakUnit unit = PeakUnit::kFp32Fma;
  bool cached = false;  // read from the cache rather than probed by this process
  std::string source;   // how it was obtained, for the header and reports
};

// The peak for bf16 or fp32 GEMM operands on `threads` threads (at most the machine's logical
// CPUs): one thread's probe of gemm_unit(), and for several threads the concurrent probe of all
// of them (when it found no clean repetition, as on a loaded machine, one core's figure times
// the threads, and `source` says so). Probes are cached per CPU model, flags, unit and thread
// count in `cache_file` (empty: no cache), written atomically; an unreadable or corrupt cache is
// ignored (and rewritten). Only clean concurrent figures are cached.
CpuPeak measure_cpu_peak(bool bf16, int threads, const EnvInfo& env,
                         const std::filesystem::path& cache_file);
// $FT_CACHE_DIR/cpu_peak.json, else $XDG_CACHE_HOME/ft/..., else $HOME/.cache/ft/...; empty
// when none is set or FT_CACHE_DIR is "off".
std::filesystem::path default_peak_cache();

}  // namespace ft
