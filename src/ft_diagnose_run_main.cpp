// ft_diagnose_run_main.cpp: `ft-diagnose run`: trains in-process with profiling, writes the trace
// and the diagnosis. ft-diagnose execs this binary, so that re-analysing a trace loads no trainer.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_main.h"
#include "ft/core/error.h"
#include "ft/profiler/findings.h"
#include "ft/profiler/multi_rank.h"
#include "ft/profiler/trace_reader.h"
#include "ft/profiler/trace_writer.h"
#include "ft_diagnose/cli.h"
#include "ft_diagnose/run_cmd.h"

namespace {

namespace fs = std::filesystem;
using namespace ft::diagnose;

int run(int argc, char** argv) {
  const CliArgs a = parse_cli(std::vector<std::string>(argv + 1, argv + argc), /*run_mode=*/true);
  if (!a.hta_json.empty()) throw ft::ConfigError("--hta-json applies to trace re-analysis only");
  RunOptions ro;
  ro.profile_steps = a.profile;
  if (std::find(a.rest.begin(), a.rest.end(), "--help") != a.rest.end() ||
      std::find(a.rest.begin(), a.rest.end(), "-h") != a.rest.end()) {
    // `ft-diagnose run --help`: this command's usage, then every ft-train option it takes.
    fmt::print("{}\n", kUsage);
    ft::profiler::Trace unused;
    run_profiled({"--help"}, ro, &unused);
    return 0;
  }
  if (a.out.empty())
    throw ft::ConfigError("ft-diagnose run needs --out DIR (see ft-diagnose run --help)");
  if (a.ranks > 1) {
    bool help = false;
    const int rc = run_ranks(a.rest, ro, a.ranks, a.out, &help);
    if (help || rc != 0) return rc;
    const auto traces = ft::profiler::read_rank_traces(a.out);
    const fs::path merged = fs::path(a.out) / "trace.merged.json";
    const uint64_t bytes =
        ft::profiler::write_trace_json(ft::profiler::merge_rank_traces(traces), merged);
    fmt::print("wrote {} ({} ranks, {} bytes)\n", merged.string(), traces.size(), bytes);
    return finish(ft::profiler::diagnose_ranks(traces), a.out, a.gates, a.top);
  }
  ft::profiler::Trace recorded;
  if (!run_profiled(a.rest, ro, &recorded)) return 0;
  std::error_code ec;
  fs::create_directories(a.out, ec);
  if (ec) throw ft::IoError(fmt::format("cannot create '{}': {}", a.out, ec.message()));
  const fs::path trace_path = fs::path(a.out) / "trace.json";
  const uint64_t bytes = ft::profiler::write_trace_json(recorded, trace_path);
  // Analyse what was written, so that `ft-diagnose DIR` later gives the same report.
  const ft::profiler::Trace trace = ft::profiler::read_trace_json(trace_path);
  fmt::print("wrote {} ({} events, {} bytes, {} dropped)\n", trace_path.string(),
             trace.events.size(), bytes, trace.dropped_events);
  const int rc = finish(ft::profiler::diagnose(trace), a.out, a.gates, a.top);
  if (const auto it = trace.metadata.find("run.oom"); it != trace.metadata.end()) {
    std::fprintf(stderr, "ft-diagnose: the run stopped: %s (trace and report written)\n",
                 it->second.c_str());
    return 3;  // ft-train's out-of-memory status; the trace and report are written
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  return ft::run_command_line("ft-diagnose", [&] { return run(argc, argv); });
}
