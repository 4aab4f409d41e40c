// findings.h: ranked findings (what to fix, with evidence and ft knobs) and the full diagnosis of a
// trace.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ft/profiler/classifier.h"
#include "ft/profiler/diagnosis.h"
#include "ft/profiler/event.h"

namespace ft::profiler {

// What the findings need to know about the run beyond the timeline. Read from the trace's
// metadata (keys "config.*", "env.*", "run.*"; see docs/classification.md); unknown fields
// keep their defaults and the rules that need them stay silent.
// The title every out-of-memory finding starts with (a fatal finding: it ranks first).
inline constexpr const char* kOomTitle = "The run ran out of memory";

struct RunInfo {
  std::string precision;  // "fp32", "bf16", "fp16"; "" unknown
  int micro_batch = 0, seq_len = 0, grad_accum = 0, steps = 0;
  int warmup = -1;          // LR warmup steps; -1 unknown
  int warmup_excluded = 2;  // first steps left out of totals and findings
  int threads = 0, loader_workers = -1, logical_cpus = 0;
  int prefetch = 0;  // ready batches the loader queues ahead (0: unknown)
  // The step's GEMMs in bf16 over fp32, measured on the run's shapes before training (0: not
  // measured).
  double gemm_bf16_speedup = 0;
  double lr = 0, clip = -1, mfu = -1, load_average = -1;
  bool allocator_caching = true;
  bool allocator_huge_pages = true;  // host segments advised transparent huge pages
  std::string checkpoint;      // "none", "block"
  std::string h2d;             // --device cuda input path: "pinned", "pageable"; "" unknown
  double memory_limit = 0;     // bytes (0: none)
  double memory_capacity = 0;  // bytes available to the run (limit, else MemAvailable)
  double mem_peak = 0, mem_reserved_peak = 0;  // bytes
  double data_produce_ms = -1;  // mean batch production time per steady step (-1: not recorded)
  int64_t alloc_retries = 0, ooms = 0, segment_maps = 0, segment_unmaps = 0;
  // The run stopped out of memory (run.oom: the allocator's message with its state; run.oom_step:
  // the step it failed in); "" when it did not.
  std::string oom;
  int64_t oom_step = -1;
  // What each memory knob would make of this run (`ft-diagnose run` only: the memory model's
  // peak scaled by this run's measured / predicted peak, and a step time from the run's own
  // phases; step_ms < 0: not predicted), keyed by the knob ("--checkpoint block", ...).
  struct MemoryOption {
    double peak = 0, step_ms = -1;
    std::string basis;
  };
  std::map<std::string, MemoryOption> memory_options;
  int cpu_vector_bits = 0;                      // widest vector ISA of the CPU (512, 256, 128)
  std::string gemm_library;                     // e.g. "oneDNN 2.6.3 (max ISA avx512_core_amx)"
  std::map<std::string, std::string> env_vars;  // OPENBLAS_CORETYPE, OMP_NUM_THREADS, ...

  static RunInfo from_metadata(const std::map<std::string, std::string>& metadata);
};

// Thresholds (docs/classification.md, next to the anchors they come from).
struct FindingRules {
  double data_share = 0.05;    // TensorBoard plugin: DataLoader > 5% of step
  double comm_share = 0.10;    // TensorBoard plugin: communication > 10%
  double pcie_share = 0.10;    // TraceML: H2D_BOUND warning at 10%
  double memory_share = 0.05;  // allocator + page-fault time
  double sync_share = 0.05;
  double host_share = 0.10;
  double other_share = 0.15;             // unexplained time
  double critical_share = 0.20;          // TraceML: critical at 20%
  double memory_capacity_frac = 0.90;    // TensorBoard plugin: memory > 90% of capacity
  double reserved_over_allocated = 2.0;  // TraceML: reserved/allocated >= 2
  uint64_t sync_copy_bytes = 64 * 1024;  // Nsight: synchronous copies > 64 KB
  double compute_bound_share = 0.50;     // precision rule: compute share of the step at least this
  double bf16_speedup = 2.0;  // assumed bf16-over-fp32 speed-up of compute (conservative)
  // GPU traces: SIMT fp32 GEMM kernels ("sgemm" without a tensor-core tile in the name) at least
  // this share of the step; tensor cores (TF32 or bf16) assumed this much faster on them (half
  // the A100's dense TF32-over-fp32 peak ratio, 156 / 19.5 TFLOP/s).
  double simt_gemm_share = 0.10;
  double tensor_core_speedup = 4.0;
  // GPU traces with no pinned upload to measure: a pageable upload's copy assumed this much
  // faster from page-locked memory (conservative: 7.6x measured on an H200, 128 MiB in 18.7
  // against 2.46 ms; pageable copies are staged through a driver buffer by the CPU).
  double pinned_copy_speedup = 3.0;
  int underfilled_tokens = 512;  // batch rule: tokens per micro-batch at most this
  // ... and MFU below this. Measured on Zen 4 (bf16 peak 235 GFLOP/s/core): the underfilled
  // scenario (32 tokens) runs at 31% MFU and doubling its micro-batch is 1.27x faster, while
  // 512-token micro-batches of the other scenarios run at 51-80%; on Zen 5 and AMX (higher bf16
  // peaks) small batches read 10-20%.
  double underfilled_mfu = 0.45;
  // Across ranks (multi_rank.h).
  double bubble_share = 0.05;        // pipeline idle share of step time worth a finding
  double straggler_dominance = 2.0;  // the straggler's late arrivals cost the others this many
                                     // times the wait any other rank's cost,
  double straggler_steps = 0.5;      // and it arrives late in at least this share of the steps
  double late_margin_ms = 0.05;      // reaching a collective last by less is not arriving late,
  double late_margin_step = 0.02;    // nor by less than this share of the median step
};

// One diagnosis rule as the table lists it: its name, the finding class it raises, when it fires
// (the FindingRules field and default) and the knobs it names.
struct RuleInfo {
  const char* name;
  const char* cls;
  const char* fires_when;
  const char* knobs;
};
// The one table of rules (findings.cpp), in the order find_issues runs them.
const std::vector<RuleInfo>& finding_rules();
// Runs the rule `name` alone (its own tests); throws std::invalid_argument for an unknown name.
std::vector<Finding> apply_rule(const std::string& name, const Trace& trace,
                                const std::vector<StepBreakdown>& steps, const RunInfo& run,
                                const LossHealth& loss, const FindingRules& rules = {});

// Findings from the steps, ranked: unstable loss (warning or worse) first, then by recoverable
// share of wall time, then risk-only findings by severity.
std::vector<Finding> find_issues(const Trace& trace, const std::vector<StepBreakdown>& steps,
                                 const RunInfo& run, const LossHealth& loss,
                                 const FindingRules& rules = {});

// What-if per finding (docs/classification.md, "Predictions"): from the steady steps' mean
// partition, the step time with the finding's cause removed or reduced, and what that assumes.
// Each saving is at most the time its class holds, and a copy or collective can hide at most
// behind the compute of the step, so the time-class savings together never exceed the step's
// waiting (the device's idle time on a GPU trace); a compute finding (precision, batch) saves
// part of the compute instead. Findings of unknown cause ("other", risks) get none.
// Kernel speed-ups (precision, batch) on a device-partitioned step save at most
// `host_lead_ms`, the host's lead over the device (host_lead_ms below; -1: unknown, no bound).
void predict_findings(const std::vector<const StepBreakdown*>& steady,
                      std::vector<Finding>* findings, double host_lead_ms = -1);

// The device's idle time per step (ms, by WaitClass) over the first steady steps (at most 8) as
// the step graph charges it (each idle stretch to what held back the op that ends it: its launch
// and the host chain before it, a wait on another stream, or a delay the trace does not explain)
// and as the partition's instant rule does ("device.idle.<class>"). `computed` is false without
// a device on the training rank. The check behind docs/classification.md, "Attribution and the
// graph".
struct IdleAttribution {
  bool computed = false;
  std::array<double, kNumWaitClasses> graph_ms{}, instant_ms{};
  double unlinked_ms = 0;  // of graph_ms's other: idle ended by ops with no launch linked
};
IdleAttribution compare_idle_attribution(const Trace& trace,
                                         const std::vector<const StepBreakdown*>& steady);

// How far the host runs ahead of the device, per steady step: the mean over steps of how long
// the step's last-ending kernel waited after its launch call returned (0 for a host that launches
// each kernel just in time); -1 when no kernel is linked to its launch.
double host_lead_ms(const Trace& trace, const std::vector<const StepBreakdown*>& steady);

// What the trace holds that the analysis could not use (Diagnosis::warnings): the reader's counts
// of spans with a negative duration or timestamp ("input.*" metadata), step spans that start
// inside an earlier one, device ops whose correlation id no host call carries, and on imported
// traces the spans outside every step.
std::vector<std::string> input_warnings(const Trace& trace,
                                        const std::vector<StepBreakdown>& steps);

// Diagnosis::trace_summary over the steady steps (computed only with a busy device on the
// training rank).
TraceSummary summarize_trace(const Trace& trace, const std::vector<const StepBreakdown*>& steady);

// Diagnosis::timeline: the steady step of median wall time and the steady step after it: every
// span on the training thread and up to kTimelineLanes - 1 other lanes (the busiest host threads
// and the device's streams), classed as the classifier classes them (device: compute / comm /
// pcie; host: the blocking class of a runtime call, else data / memory / host, and compute on a
// trace with no device). Spans too short to see are drawn as runs ("N short spans"); at most
// kTimelineSpans are kept, the shortest counted as hidden.
constexpr size_t kTimelineLanes = 16;
constexpr size_t kTimelineSpans = 4000;
Timeline build_timeline(const Trace& trace, const std::vector<const StepBreakdown*>& steady);

// Sorts findings into the ranking order above (stable).
void rank_findings(std::vector<Finding>* findings);

// The steps totals and findings use: all but the first run.warmup_excluded (when more remain)
// and, when steps are a device's windows (device.busy.* details), all but the last, which has no
// next step to end it (HTA drops it too);
// less stub steps (shorter than kStubFraction of the median step after the warm-up, or with no
// device work while other steps have some). When that leaves nothing, the non-stub warm-up steps;
// failing those, every step after the warm-up.
inline constexpr double kStubFraction = 0.1;
std::vector<const StepBreakdown*> steady_steps(const std::vector<StepBreakdown>& steps,
                                               const RunInfo& run);

// Everything: partition, totals, memory, loss health, findings, config and environment.
Diagnosis diagnose(const Trace& trace, const ClassifyOptions& options = {},
                   const FindingRules& rules = {});

// CI gates: "CLASS>PCT" (e.g. "data>20%"). A wait class compares its share of wall time; a
// finding class (precision, batch, ...) the largest share among its findings; loss and
// environment trip on any finding at warning or above. Throws ConfigError on bad syntax.
struct Gate {
  std::string cls;
  double pct = 0;
  std::string text;
};
Gate parse_gate(const std::string& text);
// Returns the gates that tripped, each with a message.
std::vector<std::string> check_gates(const Diagnosis& d, const std::vector<Gate>& gates);

}  // namespace ft::profiler
