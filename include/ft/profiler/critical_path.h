// critical_path.h: HTA v0.6.1's critical-path analysis of one rank of a Kineto trace.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ft/profiler/hta.h"

namespace ft::profiler {

struct CriticalPathOptions {
  int rank = 0;
  std::string annotation = "ProfilerStep";  // "" = the whole rank
  int64_t instance_first = 0;               // 0-based instance range, inclusive
  int64_t instance_last = 0;
  bool add_zero_weight_launch_edges = false;   // CRITICAL_PATH_ADD_ZERO_WEIGHT_LAUNCH_EDGE=1
  bool strict_negative_weight_checks = false;  // CRITICAL_PATH_STRICT_NEGATIVE_WEIGHT_CHECKS=1
  std::vector<std::string> data_load_events;   // regexes (HTA's data_load_events)
};

// One edge of the critical path, in path order.
struct CriticalPathEdge {
  std::string type;      // operator, dependency, kernel_launch_delay, kernel_kernel_delay, ...
  int64_t weight = 0;    // µs; may be negative (the graph used 0)
  std::string bound_by;  // cpu_bound, gpu_compute_bound, ... ("" for dependencies)
  int64_t src_ts = 0;
  int64_t dst_ts = 0;
  int64_t attributed_ev_idx = -1;  // position in traceEvents; -1 = none
  std::string attributed_name;
};

struct CriticalPathResult {
  bool success = false;
  std::string error;  // set when HTA returns None or raises
  int64_t total_us = 0;
  std::vector<CriticalPathEdge> edges;
  nlohmann::json json;  // HTA's field names (see tests/data/hta_critical_path.json)
};

// Runs the analysis on `trace_path` (a Kineto JSON file, .gz or not, or a directory holding the
// rank's file).
CriticalPathResult critical_path(const std::string& trace_path, const CriticalPathOptions& options);
// The same on trace JSON text held in memory.
CriticalPathResult critical_path_from_text(const std::string& text,
                                           const CriticalPathOptions& options);
// critical_path(...).json.
nlohmann::json critical_path_analysis(const std::string& trace_path,
                                      const CriticalPathOptions& options);

// HTA v0.6.1's get_gpu_user_annotation_breakdown(use_gpu_annotation, duration_ratio,
// num_kernels) over every Kineto file of `trace_path` (a file, or a directory of rank files):
// {"args", "records"} with HTA's column names ("sum (us)", "max (us)", "min (us)", "stddev",
// "mean (us)", "rank"), sorted by rank and name; records null when no row has the category.
// Annotations use HTA's loading rules (µs rounding, the last-ProfilerStep drop).
nlohmann::json gpu_user_annotation_breakdown(const std::string& trace_path,
                                             bool use_gpu_annotation = true,
                                             double duration_ratio = 0.8,
                                             size_t num_kernels = 1000);

// HTA's get_frequent_cuda_kernel_sequences arguments.
struct KernelSequenceOptions {
  std::string operator_name = "aten::linear";  // CPU ops whose name holds this are the roots
  size_t min_pattern_len = 3;                  // roots with fewer kernels are left out
};

// What ft-hta adds to the six core analyses, from one parse of each file: "critical_path" (of the
// first rank file, as critical_path), "gpu_user_annotation_breakdown" (a list: the GPU
// annotations', then the CPU annotations' with use_gpu_annotation = false) and
// "frequent_cuda_kernel_sequences" ({"args", "ranks": {"<rank>": [pattern, count, "GPU kernel
// duration (us)", "CPU op duration (us)"], every pattern by count}}) and
// "cupti_counter_data_with_operators" ({"ranks": {"<rank>": [name, ts, dur, op_stack,
// top_level_op, bottom_level_op, each counter]}}, ranks with CUPTI range-profiler kernels only).
// A part that fails carries {"success": false, "error"} instead.
nlohmann::json hta_json_analyses(const std::string& trace_path, const CriticalPathOptions& options,
                                 const KernelSequenceOptions& sequences = {});

// A trace's whole entry as ft-hta and `ft-diagnose --hta-json` write it: hta_analyses_of's and
// hta_json_analyses's, each reading the file itself, side by side on the machine's cores.
nlohmann::json hta_entry(const std::string& trace_path, const HtaOptions& hta,
                         const CriticalPathOptions& options,
                         const KernelSequenceOptions& sequences = {});

}  // namespace ft::profiler
