// hta_counters.h: HTA's per-rank time series (queue length, memory bandwidth) and kernel table.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "ft/profiler/hta.h"
#include "hta_frame.h"

namespace ft::profiler::kineto {

// numpy 1.24's argsort(kind="quicksort"): the order pandas' sort_values leaves equal keys in.
std::vector<int64_t> numpy_argsort_quicksort(const std::vector<int64_t>& v);

// HTA's queue length for one rank (TraceCounters): `summary` gains "rank<R>_stream<S>" ->
// describe() of the queue length; `series` (may be null) gains "<R>" -> columns ts, stream,
// queue_length; `blocked` (may be null) gains one row per stream that reaches
// `max_queue_length`: rank, stream, duration_at_max_queue_length and its share of the rank's
// trace duration. `launch_kinds`: bit 0 set for names that enqueue work.
void queue_length_analyses(const HtaFrame& f, const std::vector<uint8_t>& launch_kinds,
                           int64_t max_queue_length, nlohmann::json* summary,
                           nlohmann::json* series, nlohmann::json* blocked);

// HTA's memory bandwidth of copies and memsets for one rank: `series` (may be null) gains "<R>"
// -> columns ts, name, memory_bw_gbps (a step function per copy kind); `summary` gains one
// describe() row per copy kind over the series' positive points.
void memory_bw_analyses(const HtaFrame& f, const StringTable& names, nlohmann::json* series,
                        nlohmann::json* summary);

// HTA's get_gpu_kernel_breakdown(include_memory_kernels=True) table rows of one rank and type:
// name, "sum (us)", "max (us)", "min (us)", "mean (us)", stddev, kernel_type, rank (kernels past
// num_kernels or past the duration_ratio quantile of the cumulative sum become "others").
std::vector<nlohmann::json> kernel_breakdown_rows(const HtaFrame& f, const StringTable& names,
                                                  HtaKernelType type, const HtaOptions& o);

}  // namespace ft::profiler::kineto
