// report.h: the sweep's outputs: best.cfg and report.{md,html,json} (atomic writes).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "ft/reports/sweep_report.h"
#include "ft/tuner/search.h"

namespace ft::tuner {

// Indices into outcome.trials of the ok short trials on the throughput / peak-memory Pareto
// front (no other ok trial is both faster and smaller), sorted by peak memory.
std::vector<int> pareto_front(const std::vector<JournalEntry>& trials);

// What the sweep report shows (reports/ renders it: reports::render_sweep_{json,markdown,html}).
reports::SweepReport sweep_report(const SweepOutcome& outcome, const SweepOptions& options);

// Writes DIR/best.cfg (ft-train's engine only; removed when the baseline failed) and
// DIR/report.{md,html,json}, each atomically.
void write_outputs(const std::filesystem::path& dir, const SweepOutcome& outcome,
                   const SweepOptions& options);

}  // namespace ft::tuner
