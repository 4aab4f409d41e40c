// format.h: deterministic number formatting and summary helpers shared by the report writers.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ft/profiler/diagnosis.h"

namespace ft::reports::detail {

// report.json without indentation (for embedding in report.html).
std::string render_json_compact(const profiler::Diagnosis& d);
// report.html is html_page(html_body(d), render_json_compact(d)): its body (<header> to </main>)
// does not depend on the data, so the two are rendered side by side (write_reports).
std::string html_body(const profiler::Diagnosis& d);
std::string html_page(const std::string& body, const std::string& json);

// The head of ft's HTML pages (a diagnosis' and a sweep's report.html) up to </style>: doctype,
// a Content-Security-Policy without network access (scripts only with `script_nonce`), the
// escaped title, the shared CSS and then `extra_style`.
std::string html_head(const std::string& title, const std::string& script_nonce,
                      const std::string& extra_style = "");
// The "What ran" section (Diagnosis::trace_summary), empty when not computed
// (trace_summary_report.cpp).
void add_trace_summary_json(nlohmann::ordered_json& j, const profiler::Diagnosis& d);
std::string trace_summary_markdown(const profiler::Diagnosis& d);
std::string trace_summary_html(const profiler::Diagnosis& d);
// The timeline of steady steps (Diagnosis::timeline), empty when there is none
// (timeline_report.cpp).
void add_timeline_json(nlohmann::ordered_json& j, const profiler::Diagnosis& d);
std::string timeline_html(const profiler::Diagnosis& d);

// A summary card: the key above its value, both escaped.
std::string html_card(const std::string& key, const std::string& value);

std::string fixed(double x, int decimals);            // "12.35"; NaN/inf -> "n/a"
std::string percent(double share, int decimals = 1);  // 0.1234 -> "12.3%"
// Figures a trace may not record (an imported trace has no tokens or peak): NaN -> "unknown".
std::string known_percent(double share);    // percent, or "unknown"
std::string tokens_rate(double per_s);      // "1234 tokens/s", or "tokens/s unknown"
std::string bytes_h(double bytes);          // "1.50 GiB", "12.0 MiB", "512 B"
std::string recorded_bytes(double bytes);   // bytes_h, or "not recorded" for NaN
std::string sig(double x, int digits = 4);  // significant digits, e.g. loss "3.142" / lr "0.0006"

// Run-level numbers derived from the steps.
struct RunSummary {
  int64_t steps = 0;
  double total_ms = 0;
  double mean_ms = 0, median_ms = 0, min_ms = 0, max_ms = 0;
  std::array<double, profiler::kNumWaitClasses> class_ms{};  // summed over steps
};
RunSummary summarize(const profiler::Diagnosis& d);

// Indices of the steps to list in a table: all when there are at most `limit`, otherwise the
// first and last limit/2 (the caller marks the gap).
std::vector<size_t> abbreviated_rows(size_t n, size_t limit);
// Indices of the `k` slowest steps, slowest first.
std::vector<size_t> slowest_steps(const profiler::Diagnosis& d, size_t k);
// "3-7, 12, 20-22" for a sorted or unsorted list of step numbers.
std::string step_ranges(std::vector<int64_t> steps, size_t max_items = 12);

}  // namespace ft::reports::detail
