// report.h: the sweep's outputs: best.cfg and report.{md,html,json} (atomic writes).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "ft/tuner/search.h"

namespace ft::tuner {

// Indices into outcome.trials of the ok short trials on the throughput / peak-memory Pareto
// front (no other ok trial is both faster and smaller), sorted by peak memory.
std::vector<int> pareto_front(const std::vector<JournalEntry>& trials);

nlohmann::json report_json(const SweepOutcome& outcome, const SweepOptions& options);
std::string report_markdown(const SweepOutcome& outcome, const SweepOptions& options);
// Self-contained HTML with inline SVG charts; every text is escaped.
std::string report_html(const SweepOutcome& outcome, const SweepOptions& options);
std::string html_escape(const std::string& s);

// Writes DIR/best.cfg and DIR/report.{md,html,json}, each atomically.
void write_outputs(const std::filesystem::path& dir, const SweepOutcome& outcome,
                   const SweepOptions& options);

}  // namespace ft::tuner
