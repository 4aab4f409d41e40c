// critical_path_rows.h: a rank's rows as HTA's critical-path analysis sees them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "json_stream.h"

namespace ft::profiler::kineto {

struct CpRow {
  int64_t ev_idx = 0;  // position in traceEvents
  std::string name;
  std::string cat;
  int64_t pid = 0;
  int64_t tid = 0;
  int64_t ts = 0;   // ceil(ts µs), shifted so that the rank's minimum is 0
  int64_t dur = 0;  // floor(ts + dur) - ts
  int64_t stream = -1;
  int64_t corr = -1;
  int64_t wait_stream = -1;
  int64_t wait_corr = -1;
  int64_t partner = -1;      // row position of the CPU/GPU partner, -1 = none
  bool linked_corr = false;  // HTA's index_correlation >= 0 (a correlation, partner or not)
  // cuda_profiler_range rows (CUPTI range-profiler mode): the performance counters in args.
  std::vector<std::pair<std::string, double>> counters;
  int64_t end() const { return ts + dur; }
  bool gpu() const { return stream != -1; }
};

struct CpTrace {
  std::vector<CpRow> rows;  // HTA's dataframe order
  bool has_cuda_sync = false;
  int64_t rank = 0;  // distributedInfo.rank (0 when absent, as HTA)
};

// Every rank file of `trace_path` (a file, or a directory's *.json / *.json.gz by name) loaded by
// load_cp_trace; a file without traceEvents beside traces (PyTorch's execution trace) is skipped.
std::vector<CpTrace> load_cp_traces(const std::string& trace_path, bool align_and_cut);

// HTA v0.6.1's get_gpu_user_annotation_breakdown over these ranks' rows (annotation_breakdown.cpp):
// `args` and `records` as in tests/data/hta_critical_path.json.
nlohmann::json user_annotation_breakdown(const std::vector<const CpTrace*>& ranks,
                                         bool use_gpu_annotation, double duration_ratio,
                                         size_t num_kernels);

// HTA v0.6.1's get_frequent_cuda_kernel_sequences on one rank (kernel_sequences.cpp): every
// pattern (the root op's name, then its subtree's kernels in start order, joined by "|"), most
// frequent first, with its count and summed GPU kernel and CPU op durations.
nlohmann::json frequent_kernel_sequences(const CpTrace& t, const std::string& operator_name,
                                         size_t min_pattern_len);

// HTA v0.6.1's get_cupti_counter_data_with_operators on one rank (cupti_counters.cpp): per
// cuda_profiler_range kernel (matched to the cudaLaunchKernel calls in time order), its name, ts,
// dur, op_stack (the launch's enclosing cpu_ops, outermost first), top_level_op,
// bottom_level_op and every counter. Null when the rank has no such kernel; {"success": false,
// "error"} when launches and kernels do not pair up (HTA drops the rank).
nlohmann::json cupti_counter_data_with_operators(const CpTrace& t);

// HTA v0.6.1's get_aten_op_kernels_and_delay on one rank (aten_op_delay.cpp): per ATen op name
// and the kernel sequence its instances launch ("k1 -> k2"), the number of instances and the mean
// delays of the first launch after the op's start and of its kernel after the launch (µs). A
// launch belongs to the latest-starting "aten::" row that wraps it whole; launches without a
// kernel are left out (HTA raises on them).
nlohmann::json aten_op_kernels_and_delay(const CpTrace& t);

// Parses Kineto trace JSON text and applies HTA's loading rules (rounding, shift, last-step
// drop, CPU/GPU correlation); without `align_and_cut`, as HTA's TraceDiff loads a trace: no
// shift, every step kept.
CpTrace load_cp_trace(std::string text, bool align_and_cut = true);
// The same of a file: read in chunks of rows on the machine's cores when the document is a
// Kineto object with one traceEvents array and every chunk parses, else its whole text read by
// load_cp_trace (which gives the exact error); the rows are the same either way.
CpTrace load_cp_trace_file(const std::string& path, bool align_and_cut = true);
// That chunked read alone, of a document's bytes (`label` names it): nothing when the document is
// out of the ordinary (a bare array, no or two traceEvents, a chunk or a byte refused); else what
// load_cp_trace gives for its text.
std::optional<CpTrace> load_cp_trace_chunked(std::unique_ptr<ByteSource> src,
                                             const std::string& label, bool align_and_cut = true);

}  // namespace ft::profiler::kineto
