// run_cmd.h: `ft-diagnose run`: trains in-process with profiling and returns the recorded trace.
#pragma once

#include <string>
#include <vector>

#include "ft/profiler/event.h"

namespace ft::diagnose {

struct RunOptions {
  std::string profile_steps;  // "A-B", "A" or "" (every step)
  bool progress = true;       // progress bar on stderr
};

// Runs ft-train with `train_args` (ft-train's flags) under the same profiler path as
// `ft-train --trace` (profiler::TrainingProfile); returns the trace with config ("config.*"),
// environment ("env.*") and run facts ("run.*") in its metadata. Returns false (and leaves
// `trace` alone) when --help was printed.
bool run_profiled(const std::vector<std::string>& train_args, const RunOptions& options,
                  profiler::Trace* trace);

}  // namespace ft::diagnose
