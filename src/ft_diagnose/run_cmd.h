// run_cmd.h: `ft-diagnose run`: trains in-process with profiling and returns the recorded trace.
#pragma once

#include <string>
#include <vector>

#include "ft/profiler/event.h"

namespace ft::diagnose {

struct RunOptions {
  int profile_first = -1, profile_last = -1;  // inclusive step window; -1: every step
  bool progress = true;
};

// Parses "A-B" (inclusive, A <= B). Throws ConfigError.
void parse_profile_steps(const std::string& text, RunOptions* out);

// Runs ft-train with `train_args` (ft-train's flags), profiling the window; returns the trace
// with config ("config.*"), environment ("env.*") and run facts ("run.*") in its metadata.
// Returns false (and leaves `trace` alone) when --help was printed.
bool run_profiled(const std::vector<std::string>& train_args, const RunOptions& options,
                  profiler::Trace* trace);

}  // namespace ft::diagnose
