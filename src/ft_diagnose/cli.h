// cli.h: what both ft-diagnose binaries share: usage, arguments, and the printed and written
// diagnosis (ft-diagnose analyses traces; ft-diagnose-run, which it execs for `run`, trains).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "ft/profiler/diagnosis.h"
#include "ft/profiler/findings.h"

namespace ft::diagnose {

inline constexpr int kGateExit = 4;  // a --fail-if gate tripped

extern const char* const kUsage;

// ft-diagnose's arguments (after `run`, for a run).
struct CliArgs {
  std::string out, profile, input, hta_json;
  bool critical_path = false;
  std::vector<profiler::Gate> gates;
  size_t top = 5;
  int ranks = 1;
  std::vector<std::string> rest;  // run: ft-train's flags
};

// Parses `args` (without `run`) for a run (run_mode) or a re-analysis; throws ConfigError.
CliArgs parse_cli(const std::vector<std::string>& args, bool run_mode);

// Prints the summary of `d` (at most `top` findings) on stdout.
void print_diagnosis(const profiler::Diagnosis& d, size_t top);

// Writes the reports of `d` into `out_dir`, prints the summary and checks the gates; returns
// the exit status (kGateExit when one tripped).
int finish(const profiler::Diagnosis& d, const std::filesystem::path& out_dir,
           const std::vector<profiler::Gate>& gates, size_t top);

}  // namespace ft::diagnose
