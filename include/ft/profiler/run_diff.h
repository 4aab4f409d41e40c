// run_diff.h: what changed between two diagnosed runs (ft-diagnose diff A B): the step-time
// distributions with a bootstrap interval on their median ratio, the classes, the knobs, the
// findings, and for PyTorch traces HTA's TraceDiff of one step.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ft/profiler/diagnosis.h"
#include "ft/profiler/findings.h"

namespace ft::profiler {

// Fewer steady steps than this on either side: no faster/slower verdict (and no gate trips).
inline constexpr size_t kMinDiffSteps = 3;

struct StepStats {
  size_t n = 0;                                   // steady steps
  double median = 0, mean = 0, p10 = 0, p90 = 0;  // ms
};

struct RunDiff {
  std::string a_source, b_source;
  StepStats a, b;
  // Median step of B over A, and its 95% interval from 2000 bootstrap resamples of each run's
  // steady steps (fixed seed): an interval that holds 1 says the runs do not differ measurably.
  double ratio = 0, ratio_lo = 0, ratio_hi = 0;
  std::array<double, kNumWaitClasses> a_class_ms{}, b_class_ms{};  // mean steady ms per step
  std::vector<std::pair<std::string, std::pair<std::string, std::string>>> knobs;  // key: a, b
  std::vector<std::string> findings_appeared, findings_vanished;                   // "class: title"
  nlohmann::json trace_diff;  // HTA's compare_traces of the first steps (PyTorch traces), or null
  std::vector<std::string> kernels_appeared, kernels_vanished;  // from trace_diff's GPU rows
};

// Compares two diagnoses over their steady steps (steady_steps with each run's RunInfo, read
// from its trace's metadata).
RunDiff diff_runs(const Diagnosis& a, const RunInfo& run_a, const Diagnosis& b,
                  const RunInfo& run_b);

// True when B is slower than A by more than `pct` percent beyond doubt: both have at least
// kMinDiffSteps steady steps and the interval's lower bound on the median ratio is above
// 1 + pct / 100.
bool slower_beyond(const RunDiff& d, double pct);

}  // namespace ft::profiler
