// trace_diff.h: HTA v0.6.1's TraceDiff (compare_traces, ops_diff) on two Kineto traces.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace ft::profiler {

struct TraceDiffOptions {
  std::string control_label = "Control", test_label = "Test";
  int64_t control_rank = -1, test_rank = -1;            // -1: the trace's first rank
  int64_t control_iteration = -1, test_iteration = -1;  // -1: the first ProfilerStep#N
  std::string device = "ALL";                           // "CPU", "GPU" or "ALL"
  bool use_short_name = false;
};

// HTA's shorten_name: template arguments, call arguments and return types dropped, the last
// space-separated word kept; memory kernels (Memcpy, Memset, dma) keep their names.
std::string hta_short_name(std::string_view name);

// TraceDiff.compare_traces on `control` and `test` (a Kineto file, or a directory of rank files):
// {"n_rows", "columns", "counts_change_categories", "records"} with HTA's column names
// ("<label>_counts", "<label>_total_duration", "diff_counts", "diff_duration",
// "counts_change_categories"); the control's names first, sorted, then the test's others.
// Throws ConfigError for a rank or iteration the trace does not hold.
nlohmann::json compare_traces(const std::string& control, const std::string& test,
                              const TraceDiffOptions& options);

// TraceDiff.ops_diff: the names added, deleted, increased, decreased and unchanged in count.
nlohmann::json ops_diff(const std::string& control, const std::string& test,
                        const TraceDiffOptions& options);

}  // namespace ft::profiler
