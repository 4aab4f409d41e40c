// diagnosis_json.h: the one reader of report.json (reports/json_report.cpp's) into a Diagnosis.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "ft/profiler/diagnosis.h"

namespace ft::profiler {

// report.json's "format" and "version" fields; the writer (reports/json_report.cpp) and this
// reader share them.
inline constexpr const char* kDiagnosisJsonFormat = "ft-report";
inline constexpr int kDiagnosisJsonVersion = 1;

// The diagnosis a report.json object holds: findings (class, share, severity, title,
// explanation, evidence, knobs), totals, mfu, tokens/s, memory, loss health, steps, memory
// timeline, config, environment and, for multi-rank runs, the ranks. Throws FormatError naming
// `origin` and the JSON path of a missing or mistyped field (null numbers read as NaN).
Diagnosis diagnosis_from_json(const nlohmann::json& j, const std::string& origin = "report.json");

// diagnosis_from_json of a JSON text; a syntax error is a FormatError naming `origin` and the
// byte offset.
Diagnosis diagnosis_from_json_text(std::string_view text,
                                   const std::string& origin = "report.json");

// Reads a report.json file: IoError when it cannot be read, FormatError naming the file when it
// is not a diagnosis.
Diagnosis read_diagnosis_file(const std::filesystem::path& path);

}  // namespace ft::profiler
