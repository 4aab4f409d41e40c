// trace_reader.h: reads ft's own trace.json back into a Trace (re-analysis of a run directory).
#pragma once

#include <filesystem>
#include <string_view>

#include "ft/profiler/event.h"

namespace ft::profiler {

// Parses a trace written by write_trace_json. Chrome-format traces from other tools load
// with a best-effort category mapping (full Kineto import is a separate importer). Throws
// IoError when the file cannot be read and FormatError (naming the file and the byte
// offset or the event index) when it is not a valid trace.
Trace read_trace_json(const std::filesystem::path& path);
// The same from text; `origin` names the source in error messages.
Trace parse_trace_json(std::string_view text, std::string_view origin = "<memory>");

}  // namespace ft::profiler
