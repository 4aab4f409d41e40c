// temp_trace_io.h: TEMPORARY minimal Chrome/Perfetto trace.json writer and reader until prof's are
// merged.
#pragma once

#include <filesystem>

#include "ft/profiler/event.h"

namespace ft::diagnose {

// Writes spans ("X"), counters ("C") and thread names ("M") with ts/dur in µs; ft fields
// (step, arg, bytes, flags) ride along; metadata goes to a top-level "ftMetadata" object.
void write_trace_json_temp(const profiler::Trace& trace, const std::filesystem::path& path);
// Reads what write_trace_json_temp wrote (and plain Chrome traces with "cat" set to ft's
// category names). Throws IoError / FormatError naming the file and the byte or event.
profiler::Trace read_trace_json_temp(const std::filesystem::path& path);

}  // namespace ft::diagnose
