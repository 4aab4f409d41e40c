// hta.h: Holistic Trace Analysis (HTA v0.6.1) analyses recomputed by HTA's definitions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ft/profiler/event.h"
#include "ft/profiler/kineto_trace.h"

namespace ft::profiler {

// HTA's default arguments (see docs/hta_parity.md).
struct HtaOptions {
  int64_t consecutive_kernel_delay_us = 30;  // idle gaps below this are "kernel wait"
  int64_t runtime_cutoff_us = 50;            // launch statistics: runtime outliers
  int64_t launch_delay_cutoff_us = 100;      // launch statistics: launch-delay outliers
  size_t num_kernels = 10;                   // kernel breakdown: top kernels per type
  double duration_ratio = 0.8;               // kernel breakdown: cumulative share kept
  int64_t max_queue_length = 1024;  // time blocked on a full launch queue (CUDA's per stream)
  bool time_series = true;          // write the queue-length and memory-bandwidth series
};

// All analyses for one run (one trace per rank, as read by read_kineto_rank_records), as one entry
// of hta_outputs.json: ranks, events_after_load_filter, temporal_breakdown, idle_time_breakdown,
// comm_comp_overlap, kernel_type_breakdown, kernel_breakdown_rows, queue_length_summary,
// cuda_kernel_launch_stats; and HTA's analyses hta_outputs.json lacks: idle_interval_stats,
// kernel_breakdown (the table), queue_length_time_series, time_blocked_on_full_queue,
// memory_bw_time_series, memory_bw_summary (series are columns per rank: {"ts": [...], ...}). Times
// are integer µs after HTA's rounding. Traces without a source category (legacy autograd JSON) have
// no rows HTA would keep; their entry has zero events and empty analyses.
nlohmann::json hta_analyses(const std::vector<KinetoTrace>& ranks, const HtaOptions& options = {});
// The same, freeing each rank's records as soon as its HTA frame is built (peak memory: the
// records plus one rank's frame, not both for the whole run).
nlohmann::json hta_analyses(std::vector<KinetoTrace>&& ranks, const HtaOptions& options = {});

// Reads the trace at `trace_path` (a file or a directory of ranks) without the [memory] samples,
// which no analysis uses, and runs hta_analyses, freeing each rank's records as it goes.
nlohmann::json hta_analyses_of(const std::string& trace_path, const HtaOptions& options = {});

// HTA's MemoryAnalysis over a PyTorch memory timeline export (a JSON array, gzip or not, of
// [time, action, bytes, category]): {"categories" (PyTorch's 8, by index), "times", "sizes" (bytes
// per category at each time, a step function), "peak" {time, bytes, by_category}}. Negative
// times (allocations from before profiling) read as the earliest positive time, as in HTA.
// Throws FormatError naming the entry on anything else.
nlohmann::json hta_memory_timeline(const std::string& path);

// The key hta_outputs.json uses for a trace path: a directory's path relative to `traces_root`
// (e.g. "trace_diff/control"); a directory without a root is keyed relative to the nearest
// ancestor holding hta_outputs.json, else by its name; a file by its directory's name.
std::string hta_entry_key(const std::string& trace_path, const std::string& traces_root = "");

}  // namespace ft::profiler
