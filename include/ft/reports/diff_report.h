// diff_report.h: renders a comparison of two runs (profiler::RunDiff) as JSON, Markdown and
// self-contained HTML (ft-diagnose diff).
#pragma once

#include <filesystem>
#include <string>

#include "ft/profiler/run_diff.h"

namespace ft::reports {

std::string render_diff_json(const profiler::RunDiff& d);      // diff.json
std::string render_diff_markdown(const profiler::RunDiff& d);  // diff.md
std::string render_diff_html(const profiler::RunDiff& d);      // diff.html, everything escaped
// Writes diff.json, diff.md and diff.html into `dir` (created if missing), each atomically.
void write_diff_reports(const profiler::RunDiff& d, const std::filesystem::path& dir);

}  // namespace ft::reports
