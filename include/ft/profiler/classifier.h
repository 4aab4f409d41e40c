// classifier.h: splits each training step's wall time exactly into wait classes
// (docs/classification.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ft/profiler/diagnosis.h"
#include "ft/profiler/event.h"

namespace ft::profiler {

// Counter names the classifier reads (Phase::kCounter events; `step` set, or time-matched).
inline constexpr const char* kCounterMinorFaults = "page_faults.minor";  // faults during the step
inline constexpr const char* kCounterSystemNs = "cpu.system_ns";  // kernel CPU time in the step
inline constexpr const char* kCounterLoss = "loss";
inline constexpr const char* kCounterLr = "lr";
inline constexpr const char* kCounterGradNorm = "grad_norm";
inline constexpr const char* kCounterMemAllocated = "mem.allocated";  // bytes at step end
inline constexpr const char* kCounterMemReserved = "mem.reserved";
inline constexpr const char* kCounterTokensPerS = "tokens_per_s";
inline constexpr const char* kCounterMfu = "mfu";  // model FLOPs utilisation of the step (0..1)
// Also recorded by the host tracer (profiler/host_tracer.cpp), read by no rule yet.
inline constexpr const char* kCounterMemPeak = "mem.peak";
inline constexpr const char* kCounterMajorFaults = "page_faults.major";
inline constexpr const char* kCounterDataMs = "data_ms";  // the trainer's own loader-wait time
// Time spent producing the step's batches (preprocessing, tokenising, packing, the batch copy),
// on whichever thread did it: a loader worker's work, or the training thread's when in-line.
inline constexpr const char* kCounterDataProduceMs = "data.produce_ms";
// Trace::metadata keys holding the measured cost of one first-touch page fault (ns): a 4 KiB
// page, and a transparent huge page ("0": none granted). A trace without the second is from
// before the split: its page_fault_ns is charged for every fault.
inline constexpr const char* kMetaPageFaultNs = "page_fault_ns";
inline constexpr const char* kMetaHugePageFaultNs = "huge_page_fault_ns";

struct ClassifyOptions {
  // Cost of one minor page fault (first touch of a fresh 4 KiB page). 0: take it from the
  // trace's metadata (kMetaPageFaultNs), else kDefaultPageFaultNs.
  double page_fault_ns = 0;
  // Cost of a fault that maps a transparent huge page. < 0: from the trace's metadata
  // (kMetaHugePageFaultNs); without that key, none (every fault costs page_fault_ns). A step's
  // faults count as huge up to one per 2 MiB its allocator slow paths requested (kAlloc spans
  // flagged kSlowPath, their bytes): the rest are 4 KiB faults.
  double huge_page_fault_ns = -1;
  static constexpr double kDefaultPageFaultNs = 13000;  // 4 KiB first touch on the reference VM
};

// One step's partition in integer nanoseconds (exact: the parts sum to wall_ns).
struct StepPartitionNs {
  int64_t step = 0;
  int64_t start_ns = 0, wall_ns = 0;
  std::array<int64_t, kNumWaitClasses> ns{};
  std::map<std::string, int64_t> detail_ns;  // same keys as StepBreakdown::detail
  int64_t page_faults = 0;                   // minor faults counted in the step
};

// Imported collectives split across ranks (prepare_kineto_trace): the part of a collective
// spent waiting for late ranks is a device span named "comm sync: NAME" (device idle detail
// "deviceN.idle.comm.sync"); the rest keeps NAME (the transfer).
inline constexpr const char* kCommSyncPrefix = "comm sync: ";
// Whether a span marks a training step (category kStep, or named ProfilerStep#N).
inline bool is_step_span(const Trace& trace, const Event& ev) {
  return ev.category == Category::kStep || trace.names.is_profiler_step(ev.name);
}

// The wait class a host span of this category counts as (kStep/kCounter: kOther).
WaitClass wait_class_of(Category c);

// Finds the training thread: the host track with the most kStep spans (ties: most step time).
// Returns false when the trace has no step spans.
bool find_training_track(const Trace& trace, Track* out);

// Partitions every step on the training thread (exact integer arithmetic). Throws FormatError
// when the trace has no steps.
std::vector<StepPartitionNs> partition_steps(const Trace& trace,
                                             const ClassifyOptions& options = {});

// The same as StepBreakdown in ms, with the step's counters (loss, lr, memory, ...) filled in.
std::vector<StepBreakdown> classify_steps(const Trace& trace, const ClassifyOptions& options = {});

}  // namespace ft::profiler

namespace ft::profiler {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;  // a transparent huge page (x86-64)

// Measured first-touch costs: a 4 KiB page (a mapping advised MADV_NOHUGEPAGE) and a
// transparent huge page (advised MADV_HUGEPAGE, as the engine allocator advises its segments;
// 0 when the kernel did not grant huge pages), each time / faults, median of the repeats.
struct PageFaultCosts {
  double small_ns = 0, huge_ns = 0;
  int64_t small_faults = 0, huge_faults = 0;  // faults the probes saw
};
PageFaultCosts measure_page_fault_costs(size_t small_bytes = size_t{4} << 20,
                                        size_t huge_bytes = size_t{32} << 20, int repeats = 3);

}  // namespace ft::profiler
