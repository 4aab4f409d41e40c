// fault_injection.h: --straggle-rank / --straggle-work, real extra compute on one rank per step.
#pragma once

#include "ft/trainer/model.h"
#include "ft/trainer/parallel.h"

namespace ft::trainer {

// On world rank p.straggle_rank (when p.straggle_work > 0): p.straggle_work GEMMs of
// (B*T, C) x (C, C)^T in fp32 through the model's Gemm, inside an FT_RANGE "fault.straggle"
// (kCompute, arg = the GEMM count), their results summed so none is dead work. Makes that rank
// a straggler for the multi-rank diagnosis (scenario (g)). Returns the GEMMs run (0 elsewhere).
int run_straggle_work(const ParallelConfig& p, int world_rank, GptModel& model, int B, int T);

}  // namespace ft::trainer
