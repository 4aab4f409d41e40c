// diagnosis.h: the classifier's output (per-step wait breakdown, findings), which the reports render.
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
const char* wait_class_name(WaitClass c);  // "compute", "data", "pcie", "comm", "memory", "host", "sync", "other"

struct StepBreakdown {
  int64_t step = 0;
  double start_ms = 0;  // from the start of the trace
  double wall_ms = 0;
  std::array<double, kNumWaitClasses> ms{};  // indexed by WaitClass; sums to wall_ms
  // Optional detail for the evidence (ms): comm transfer vs waiting for other ranks,
  // pageable copies, page faults, allocator retries, ...
  std::map<std::string, double> detail;
  double loss = 0, lr = 0, grad_norm = 0;  // NaN when unknown
  double mem_allocated = 0, mem_reserved = 0;  // bytes at step end
  double tokens_per_s = 0;
};

// One piece of evidence: which steps, what share, example spans.
struct Evidence {
  std::vector<int64_t> steps;        // the steps that show it (may be abbreviated)
  double share = 0;                  // of total wall time (0..1), when it is time
  std::vector<std::string> examples; // e.g. "loader.wait 41.2 ms at step 7 (thread main)"
  std::string detail;                // one line of numbers behind the finding
};

enum class Severity : uint8_t { kInfo, kWarning, kCritical };
const char* severity_name(Severity s);  // "info", "warning", "critical"

struct Finding {
  // One of the WaitClass names, or "precision", "batch", "loss", "environment", "parallel".
  std::string cls;
  double share = 0;           // recoverable share of wall time (0..1), or 0 for risk findings
  Severity severity = Severity::kInfo;
  std::string title;          // one line
  std::string explanation;    // plain language
  Evidence evidence;
  std::vector<std::string> knobs;  // concrete flags, e.g. "--loader-workers 4"
};

struct LossHealth {
  bool has_nan = false;
  bool diverged = false;
  int spikes = 0;               // steps whose loss jumps above the trend by the spike rule
  double oscillation = 0;       // normalised spread of loss differences
  std::string verdict;          // "healthy", "spiky", "oscillating", "diverging", "nan", "unknown"
};

struct MemorySummary {
  // bytes, bytes, 0..1; NaN when the trace recorded no memory (legacy PyTorch traces)
  double peak = 0, reserved = 0, fragmentation = 0;
  int64_t alloc_retries = 0, ooms = 0;
  int64_t page_faults = 0;  // minor faults over the profiled steps
};

struct Diagnosis {
  std::string source;  // "ft-train run", "trace.json", ...
  std::vector<StepBreakdown> steps;
  std::array<double, kNumWaitClasses> totals{};  // shares of total wall time (0..1)
  std::vector<Finding> findings;                 // ranked: recoverable time, then risk
  double mfu = 0, tokens_per_s = 0;
  MemorySummary memory;
  LossHealth loss_health;
  std::vector<std::pair<double, double>> memory_timeline;  // (ms, allocated bytes)
  std::map<std::string, std::string> config;       // ft-train flags as run
  std::map<std::string, std::string> environment;  // CPU, BLAS core type, threads, versions
};

}  // namespace ft::profiler
