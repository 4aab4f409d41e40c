// gemm_probe.h: how much faster a run's own linear-layer GEMMs go in bf16 than in fp32 on this
// machine, measured before training (what the precision finding predicts with).
#pragma once

#include <string>

#include "ft/trainer/train_config.h"

namespace ft::app {

struct GemmSpeedup {
  double ratio = 0;     // fp32 time / bf16 time of the same GEMMs; 0 when not measured
  double fp32_ms = 0;   // best forward + backward of the probed layers, fp32
  double bf16_ms = 0;   // the same in bf16 (operand conversions included)
  std::string shapes;   // e.g. "(1024,128)x(512,128)^T and (1024,512)x(128,512)^T"
  std::string why_not;  // why no ratio was measured ("" when measured)
};

// The MLP's two linear layers of `c` (C -> 4C and 4C -> C, per tensor-parallel rank, B*T rows,
// at most 2048), forward and backward through the engine's Gemm, on the threads already set for
// the run: one warm-up pass of each precision, then up to `reps` alternating repetitions (as many
// as fit in ~0.5 s, at least one), best of each. Only for a CPU run with bf16 GEMM units; never
// throws (a failure is `why_not`).
GemmSpeedup measure_gemm_bf16_speedup(const trainer::TrainConfig& c, int reps = 5);

}  // namespace ft::app
