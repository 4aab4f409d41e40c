// rules.h: what every diagnosis rule reads (one RuleContext) and the helpers the rules share.
// Internal to profiler/classify; the rule table itself is finding_rules() in findings.h.
#pragma once

#include <array>
#include <map>
#include <string>
#include <vector>

#include "ft/profiler/findings.h"

namespace ft::profiler::rules {

inline constexpr int kMaxEvidenceSteps = 12;

// Per-class time summed over the steady steps, with their detail keys.
struct Totals {
  double wall = 0;
  std::array<double, kNumWaitClasses> ms{};
  std::map<std::string, double> detail;
};

// Everything a rule may read: the trace, all steps and the steady ones, their totals (the
// device's view on a GPU run of ft's own), the run facts, the loss verdict and the thresholds.
struct RuleContext {
  const Trace& trace;
  const std::vector<StepBreakdown>& all;
  std::vector<const StepBreakdown*> steps;  // steady steps
  Totals t;
  double n = 1;  // steady steps (at least 1)
  const RunInfo& run;
  const LossHealth& loss;
  const FindingRules& r;

  RuleContext(const Trace& trace, const std::vector<StepBreakdown>& all, const RunInfo& run,
              const LossHealth& loss, const FindingRules& r);
  double detail(const char* key) const;  // summed over the steady steps, 0 when absent
  double share(WaitClass c) const;       // of the steady steps' wall time
  double ms_per_step(WaitClass c) const;
};

Totals totals_of(const std::vector<const StepBreakdown*>& steps);
double device_idle(const Totals& t, const std::string& cls);
std::vector<int64_t> steps_with(const std::vector<const StepBreakdown*>& steps, WaitClass c,
                                double min_share);
std::vector<std::string> example_spans(const Trace& trace, WaitClass c,
                                       const std::vector<const StepBreakdown*>& steps, size_t n);
Severity time_severity(double share, const FindingRules& r);
int64_t meta_int(const Trace& trace, const char* key, int64_t fallback);
// Per step of `steps`, the time (ms) each span name holds on the training thread: outermost
// instances of each name, step spans left out; only unclassified spans (wait class other) when
// `unclassified_only`.
std::map<std::string, double> span_ms_by_name(const Trace& trace,
                                              const std::vector<const StepBreakdown*>& steps,
                                              bool unclassified_only);
std::vector<std::string> pinned_knobs(const Trace& trace, const RunInfo& run);
bool is_pytorch(const Trace& trace);  // an imported Kineto trace

// A finding of wait class `c` when its share of the steady steps exceeds `threshold`.
void add_time_finding(const RuleContext& ctx, std::vector<Finding>* out, WaitClass c,
                      double threshold, std::string title, std::string explanation,
                      std::vector<std::string> knobs, std::string detail);

// The rules, one function each (rules_time.cpp: shares of step time; rules_run.cpp: run facts).
void data_rule(const RuleContext& ctx, std::vector<Finding>* out);
void memory_time_rule(const RuleContext& ctx, std::vector<Finding>* out);
void comm_rule(const RuleContext& ctx, std::vector<Finding>* out);
void pcie_rule(const RuleContext& ctx, std::vector<Finding>* out);
void sync_rule(const RuleContext& ctx, std::vector<Finding>* out);
void host_rule(const RuleContext& ctx, std::vector<Finding>* out);
void other_rule(const RuleContext& ctx, std::vector<Finding>* out);
void copy_rules(const RuleContext& ctx, std::vector<Finding>* out);
void straggler_rule(const RuleContext& ctx, std::vector<Finding>* out);
void tensor_core_rule(const RuleContext& ctx, std::vector<Finding>* out);
void precision_rule(const RuleContext& ctx, std::vector<Finding>* out);
void batch_rule(const RuleContext& ctx, std::vector<Finding>* out);
void loss_rule(const RuleContext& ctx, std::vector<Finding>* out);
void blas_coretype_rule(const RuleContext& ctx, std::vector<Finding>* out);
void onednn_isa_rule(const RuleContext& ctx, std::vector<Finding>* out);
void threads_rule(const RuleContext& ctx, std::vector<Finding>* out);
void allocator_unmap_rule(const RuleContext& ctx, std::vector<Finding>* out);
void reserved_overhang_rule(const RuleContext& ctx, std::vector<Finding>* out);
void memory_capacity_rule(const RuleContext& ctx, std::vector<Finding>* out);
void oom_rule(const RuleContext& ctx, std::vector<Finding>* out);

}  // namespace ft::profiler::rules
