// run_cmd.h: `ft-diagnose run`: trains in-process with profiling and returns the recorded trace.
#pragma once

#include <string>
#include <vector>

#include "ft/profiler/event.h"
#include "ft/trainer/train_config.h"

namespace ft::diagnose {

struct RunOptions {
  std::string profile_steps;  // "A-B", "A" or "" (every step)
  bool progress = true;       // progress bar on stderr
};

// Runs ft-train with `train_args` (ft-train's flags) under the same profiler path as
// `ft-train --trace` (profiler::TrainingProfile); returns the trace with config ("config.*"),
// environment ("env.*") and run facts ("run.*") in its metadata. Returns false (and leaves
// `trace` alone) when --help was printed. A run that runs out of memory (OutOfMemoryError)
// stops there and still returns its trace, with "run.oom" (the allocator's message and state)
// and "run.oom_step" in the metadata.
bool run_profiled(const std::vector<std::string>& train_args, const RunOptions& options,
                  profiler::Trace* trace);

// `ft-diagnose run --ranks N` (N > 1): launches `mpirun -np N --oversubscribe ft-train ARGS
// --trace OUT/trace.json --metrics OUT/metrics.jsonl`, so every rank writes OUT/trace.rankR.json
// and OUT/metrics.rankR.jsonl. ft-train is found next to ft-diagnose (FT_TRAIN overrides),
// mpirun on PATH (FT_MPIRUN overrides); as root the OMPI_ALLOW_RUN_AS_ROOT* variables are set.
// Without --dp/--tp/--pp the run is data-parallel (--dp N). Throws ConfigError when ft was built
// without MPI, mpirun is missing, or the degrees do not multiply to N. Returns mpirun's exit
// status (0: the traces are there); `help` is set when --help was asked for (nothing launched).
int run_ranks(const std::vector<std::string>& train_args, const RunOptions& options, int ranks,
              const std::string& out_dir, bool* help);

// After a multi-rank run: each DIR/trace.rankR.json gets the memory knobs' predictions
// (add_memory_options) from its rank's DIR/metrics.rankR.jsonl summary (peak, mean step), and
// is rewritten, so that `ft-diagnose DIR` later reads the same. A rank without a summary is
// left as it is.
void add_rank_memory_options(const trainer::TrainConfig& config, const std::string& out_dir);

}  // namespace ft::diagnose
