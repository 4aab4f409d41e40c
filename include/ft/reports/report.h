// report.h: renders a diagnosis as JSON, Markdown and self-contained HTML, and reads report.json
// back.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "ft/profiler/diagnosis.h"
#include "ft/profiler/diagnosis_json.h"

namespace ft::reports {

// Version of the report.json layout ("format": "ft-report", "version": kReportJsonVersion); the
// reader, profiler::diagnosis_from_json, shares it.
constexpr int kReportJsonVersion = profiler::kDiagnosisJsonVersion;

// report.json: steps[] ({step, wall_ms, breakdown{8 classes} in ms, ...}), totals (shares of
// wall time), ranked findings[], mfu, tokens_per_s, memory, loss_health, loss_curve,
// memory_timeline, config and environment. Numbers are rounded to fixed precision (ms to 1 us,
// shares to 1e-6, bytes to whole bytes, loss/lr/grad-norm to 6 significant digits) so the output
// is deterministic; unknown values (NaN) are written as null.
std::string render_json(const profiler::Diagnosis& d);

// Parses render_json's output (profiler::diagnosis_from_json_text, the one reader). Throws
// FormatError (naming `origin`, the byte offset of a syntax error or the JSON path of a
// missing/mistyped field) on malformed input.
profiler::Diagnosis parse_report_json(std::string_view text,
                                      const std::string& origin = "report.json");
// Reads a report.json file (profiler::read_diagnosis_file): IoError when it cannot be read,
// FormatError when malformed.
profiler::Diagnosis read_report_json(const std::filesystem::path& path);

// report.md: summary, per-class totals, ranked findings (evidence, knobs), per-step table
// (long runs abbreviated), memory, loss health, config and environment.
std::string render_markdown(const profiler::Diagnosis& d);

// report.html: one self-contained, offline page with inline SVG charts (stacked per-step
// breakdown, loss curve, memory over time), the findings and config/environment. Everything that
// came from a trace is escaped; the report JSON is embedded script-safe.
std::string render_html(const profiler::Diagnosis& d);

// Writes report.json, report.md and report.html into `dir` (created if missing), each atomically.
void write_reports(const profiler::Diagnosis& d, const std::filesystem::path& dir);

// Escaping helpers (exposed for tests and other writers).
std::string html_escape(std::string_view s);      // & < > " ' -> entities
std::string markdown_escape(std::string_view s);  // \ ` * _ | [ ] < > & and newlines made inert
// JSON text safe inside <script>: < > & U+2028 U+2029 as \u escapes (input must be JSON).
std::string json_for_script(std::string_view json);

}  // namespace ft::reports
