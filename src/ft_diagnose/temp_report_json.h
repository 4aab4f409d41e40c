// temp_report_json.h: TEMPORARY report.json writer until reports' write_reports(diagnosis, dir) is
// merged.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>

#include "ft/profiler/diagnosis.h"

namespace ft::diagnose {

// The report.json layout of issue 4 (steps[], totals, findings[], mfu, tokens_per_s, memory,
// loss_health), plus detail, config and environment.
nlohmann::json diagnosis_to_json_temp(const profiler::Diagnosis& d);
void write_report_json_temp(const profiler::Diagnosis& d, const std::filesystem::path& dir);

}  // namespace ft::diagnose
