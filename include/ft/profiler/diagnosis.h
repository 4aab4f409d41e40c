// diagnosis.h: the classifier's output (per-step wait breakdown, findings), which the reports
// render.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ft::profiler {

// The classes one step's wall time is split into; they sum to the step's wall time.
enum class WaitClass : uint8_t { kCompute, kData, kPcie, kComm, kMemory, kHost, kSync, kOther };
constexpr int kNumWaitClasses = 8;
const char* wait_class_name(
    WaitClass c);  // "compute", "data", "pcie", "comm", "memory", "host", "sync", "other"

struct StepBreakdown {
  int64_t step = 0;
  double start_ms = 0;  // from the start of the trace
  double wall_ms = 0;
  std::array<double, kNumWaitClasses> ms{};  // indexed by WaitClass; sums to wall_ms
  // Optional detail for the evidence (ms): comm transfer vs waiting for other ranks,
  // pageable copies, page faults, allocator retries, ...
  std::map<std::string, double> detail;
  double loss = 0, lr = 0, grad_norm = 0;      // NaN when unknown
  double mem_allocated = 0, mem_reserved = 0;  // bytes at step end
  double tokens_per_s = 0;
};

// One piece of evidence: which steps, what share, example spans.
struct Evidence {
  std::vector<int64_t> steps;         // the steps that show it (may be abbreviated)
  double share = 0;                   // of total wall time (0..1), when it is time
  std::vector<std::string> examples;  // e.g. "loader.wait 41.2 ms at step 7 (thread main)"
  std::string detail;                 // one line of numbers behind the finding
};

enum class Severity : uint8_t { kInfo, kWarning, kCritical };
const char* severity_name(Severity s);  // "info", "warning", "critical"

struct Finding {
  // One of the WaitClass names, or "precision", "batch", "loss", "environment", "parallel".
  std::string cls;
  double share = 0;  // recoverable share of wall time (0..1), or 0 for risk findings
  Severity severity = Severity::kInfo;
  std::string title;        // one line
  std::string explanation;  // plain language
  Evidence evidence;
  std::vector<std::string> knobs;  // concrete flags, e.g. "--loader-workers 4"
  // What-if: the mean steady step (ms) with this finding's cause removed or reduced as
  // `prediction` states (predict_findings in findings.h); -1 when there is no prediction.
  double predicted_step_ms = -1;
  std::string prediction;
  // False when the trace does not show what the time is spent on (host time with no traced
  // span): no fix can be modelled, so no step time is predicted. Not written to report.json.
  bool predictable = true;
  // The step-graph re-run that models the fix, when not the class's own: "cpu_work" (a host
  // finding whose time is the program's CPU work, moved off the training thread). Not written
  // to report.json.
  std::string remedy;
  // The run stopped on this (out of memory): it ranks first, whatever its share. Not written to
  // report.json (the report keeps the ranked order).
  bool fatal = false;
};

struct LossHealth {
  bool has_nan = false;
  bool diverged = false;
  int spikes = 0;          // steps whose loss jumps above the trend by the spike rule
  double oscillation = 0;  // normalised spread of loss differences
  std::string verdict;     // "healthy", "spiky", "oscillating", "diverging", "nan", "unknown"
};

struct MemorySummary {
  // bytes, bytes, 0..1; NaN when the trace recorded no memory (legacy PyTorch traces)
  double peak = 0, reserved = 0, fragmentation = 0;
  int64_t alloc_retries = 0, ooms = 0;
  int64_t page_faults = 0;  // minor faults over the profiled steps
};

// One rank of a multi-rank run (ft-diagnose of a directory of per-rank traces). Per-step values
// are means over the rank's steady steps (warm-up excluded).
struct RankBreakdown {
  int rank = 0;
  int dp_rank = 0, tp_rank = 0, pp_stage = 0;
  std::string host;
  int64_t steps = 0;                             // steady steps analysed
  double step_ms = 0;                            // mean wall time of those
  std::array<double, kNumWaitClasses> totals{};  // shares of its steady wall time
  double exposed_comm_ms = 0;                    // training thread inside comm or sync ranges
  double exposed_wait_ms = 0;     // ... of which waiting for other ranks (synchronizing)
  double collective_ms = 0;       // inside collectives matched across ranks, any thread
  double collective_sync_ms = 0;  // ... of which synchronizing (duration - the minimum)
  int64_t collectives = 0;        // matched collectives whose arrival it is compared on
  int64_t late = 0;            // of those, the ones it reached last by more than the noise margin
  double late_ms = 0;          // median margin of those
  double bubble = -1;          // pipeline idle / busy inside the pipeline span; -1: no pipeline
  double bubble_ms = 0;        // pipeline idle per step
  double clock_offset_ms = 0;  // subtracted from its timestamps to line up with rank 0
};

// Cross-rank facts of a multi-rank run.
struct ParallelSummary {
  int ranks = 0;
  int dp = 1, tp = 1, pp = 1, micro_batches = 1;
  int64_t collectives = 0;         // matched across ranks (steady steps)
  double transfer_ms = 0;          // per rank per step: the minimum duration of each collective
  double sync_ms = 0;              // per rank per step: the rest (waiting for the slowest rank)
  int straggler = -1;              // the rank that arrives late, -1: none
  double straggler_late_ms = 0;    // its median lateness
  double straggler_late_frac = 0;  // share of comparable collectives it reached late
  double bubble = -1;              // mean over stages of pipeline idle / busy; -1: no pipeline
  double bubble_theory = -1;       // (p - 1) / m
  std::string clock;               // how the ranks' timestamps were lined up
};

// HTA's critical path of one step of an imported trace (critical_path.h), as report.json carries
// it under HTA's field names.
struct CriticalPathSummary {
  bool computed = false;  // tried (imported traces only)
  bool success = false;
  std::string error;  // why there is none
  int rank = 0;
  std::string annotation;  // the window: "ProfilerStep"
  int64_t instance = -1;   // 0-based instance of the annotation (the first steady step)
  int64_t step = -1;       // that step's number
  int64_t total_us = 0;    // cp_total_duration_us
  std::map<std::string, int64_t> by_type_us;   // breakdown_by_type: duration_sum
  std::map<std::string, int64_t> by_bound_us;  // breakdown_by_bound_by: duration_sum
};

// What ran where, per steady step, on a trace with a busy device (imports and ft's CUDA runs):
// the device's busiest kernels, the training thread's CPU operators (total and self time),
// each stream's busy time, and copies and collectives with the bytes they moved.
struct OpTime {
  std::string name;
  double count = 0, total_ms = 0, self_ms = 0;  // per step
};
struct TransferTime {
  std::string kind;  // "Memcpy HtoD", "Memcpy DtoH", "Memcpy DtoD", "Memset", "collective"
  double count = 0, ms = 0, bytes = 0;  // per step; GB/s = bytes / ms / 1e6
};
struct TraceSummary {
  bool computed = false;
  double device_busy_share = 0;                         // of the steady steps' wall time
  std::vector<OpTime> kernels, cpu_ops;                 // the top ten each, by time
  std::vector<std::pair<std::string, double>> streams;  // "stream 7" -> busy ms per step
  std::vector<TransferTime> transfers;
};

// A window of steady steps as spans per thread and stream (report.html's timeline view).
struct TimelineSpan {
  uint16_t lane = 0;    // index into Timeline::lanes
  uint8_t row = 0;      // 0: outermost spans (a stream's kernels); 1: host runtime calls and waits
  uint8_t cls = 0;      // WaitClass it is drawn as
  uint32_t name = 0;    // index into Timeline::names
  double start_ms = 0;  // from Timeline::start_ms
  double dur_ms = 0;
};
struct Timeline {
  std::vector<int64_t> steps;       // the steps shown (consecutive); empty: no timeline
  double start_ms = 0, end_ms = 0;  // the window, from the trace start (as StepBreakdown)
  std::vector<std::string> lanes;   // host threads first (the training thread first), streams
  std::vector<std::string> names;   // span names (shortened)
  std::vector<TimelineSpan> spans;  // by lane, row, start
  int64_t hidden = 0;               // spans in the window too short to draw, or past the cap
};

struct Diagnosis {
  std::string source;  // "ft-train run", "trace.json", ...
  // How the steps were found in an imported trace (ProfilerStep spans, a repeating span, or the
  // whole trace as one window); "" for ft's own runs.
  std::string steps_rule;
  std::vector<StepBreakdown> steps;
  std::array<double, kNumWaitClasses> totals{};  // shares of total wall time (0..1)
  std::vector<Finding> findings;                 // ranked: recoverable time, then risk
  double mfu = 0, tokens_per_s = 0;
  MemorySummary memory;
  LossHealth loss_health;
  std::vector<std::pair<double, double>> memory_timeline;  // (ms, allocated bytes)
  std::map<std::string, std::string> config;               // ft-train flags as run
  std::map<std::string, std::string> environment;          // CPU, BLAS core type, threads, versions
  // Multi-rank runs only (empty / ranks == 0 otherwise): steps and totals above are rank 0's.
  std::vector<RankBreakdown> ranks;
  ParallelSummary parallel;
  CriticalPathSummary critical_path;  // imported traces (add_critical_path)
  // Malformed or unusable input, counted and said (never dropped silently): spans with a
  // negative duration or timestamp, overlapping steps, device ops whose correlation id no host
  // call carries, spans outside every step (docs/classification.md, "Input warnings").
  std::vector<std::string> warnings;
  TraceSummary trace_summary;
  Timeline timeline;  // the median steady step and the next (build_timeline)
};

}  // namespace ft::profiler
