// ft_diagnose_main.cpp: the ft-diagnose command: re-analyse a trace or a run, compare two, print
// and write the diagnosis; `ft-diagnose run` execs ft-diagnose-run (beside this binary), which
// links the trainer that this one does not.
#include <fmt/format.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "cli_main.h"
#include "ft/core/error.h"
#include "ft/profiler/findings.h"
#include "ft/profiler/kineto_reader.h"
#include "ft/profiler/load_trace.h"
#include "ft/profiler/multi_rank.h"
#include "ft_diagnose/cli.h"
#include "ft_diagnose/diff_cmd.h"

namespace {

namespace fs = std::filesystem;
using namespace ft::diagnose;

// Replaces this process with ft-diagnose-run (beside this binary; FT_DIAGNOSE_RUN overrides),
// passing the arguments after `run`; returns only when the exec failed, with the reason.
std::string exec_run(int argc, char** argv) {
  const fs::path bin = ft::sibling_tool("FT_DIAGNOSE_RUN", "ft-diagnose-run");
  std::vector<char*> args = {const_cast<char*>(bin.c_str())};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(bin.c_str(), args.data());
  return fmt::format("cannot run {} for `ft-diagnose run`: {} (set FT_DIAGNOSE_RUN)", bin.string(),
                     std::strerror(errno));
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    fmt::print("{}", kUsage);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "diff")
    return run_diff(std::vector<std::string>(args.begin() + 1, args.end()), kGateExit);
  if (args[0] == "run") throw ft::IoError(exec_run(argc, argv));
  const CliArgs a = parse_cli(args, /*run_mode=*/false);
  if (a.input.empty()) throw ft::ConfigError("ft-diagnose needs a run directory or a trace file");
  if (!a.profile.empty())
    throw ft::ConfigError("--profile-steps applies to `ft-diagnose run` only");
  fs::path trace_path = a.input;
  std::error_code ec;
  if (fs::is_directory(trace_path, ec) && !fs::exists(trace_path / "trace.json", ec) &&
      !ft::profiler::find_rank_traces(trace_path).empty()) {
    if (!a.hta_json.empty() || a.critical_path)
      throw ft::ConfigError(
          "--hta-json and --critical-path need a PyTorch profiler (Kineto) trace");
    const auto traces = ft::profiler::read_rank_traces(trace_path);
    return finish(ft::profiler::diagnose_ranks(traces),
                  a.out.empty() ? trace_path : fs::path(a.out), a.gates, a.top);
  }
  const bool kineto =
      ft::profiler::detect_trace_format(a.input) == ft::profiler::TraceFormat::kKineto;
  if (!kineto && fs::is_directory(trace_path)) trace_path /= "trace.json";
  if (!kineto && !fs::exists(trace_path))
    throw ft::IoError(fmt::format("no trace at '{}'", trace_path.string()));
  // HTA's analyses (--hta-json) are written beside the diagnosis (each reads the file itself);
  // their error, if any, is the one reported, as if they had run first.
  std::exception_ptr hta_error;
  std::jthread hta;
  if (!a.hta_json.empty()) {
    if (!kineto) throw ft::ConfigError("--hta-json needs a PyTorch profiler (Kineto) trace");
    hta = std::jthread([&] {
      try {
        ft::profiler::write_hta_json(a.input, a.hta_json);
      } catch (...) {
        hta_error = std::current_exception();
      }
    });
  }
  auto hta_written = [&] {
    if (hta.joinable()) hta.join();
    if (hta_error) std::rethrow_exception(hta_error);
  };
  const fs::path out_dir = !a.out.empty()                           ? fs::path(a.out)
                           : kineto && fs::is_directory(trace_path) ? trace_path
                                                                    : trace_path.parent_path();
  // A PyTorch trace, or a folder of its ranks (and their windows): every rank is diagnosed.
  if (a.critical_path && !kineto)
    throw ft::ConfigError("--critical-path needs a PyTorch profiler (Kineto) trace");
  if (!kineto) {
    return finish(ft::profiler::diagnose(ft::profiler::load_trace(a.input)),
                  out_dir.empty() ? fs::path(".") : out_dir, a.gates, a.top);
  }
  ft::profiler::Diagnosis d;
  int rank = 0;
  try {  // the traces are freed before the critical path reads the file again
    const std::vector<ft::profiler::Trace> rank_traces = ft::profiler::load_kineto_ranks(a.input);
    d = ft::profiler::diagnose_trace_ranks(rank_traces);
    rank = ft::profiler::trace_rank(rank_traces.front());
  } catch (...) {
    hta_written();
    throw;
  }
  hta_written();
  if (a.critical_path) ft::profiler::add_critical_path(a.input, rank, &d);
  return finish(d, out_dir.empty() ? fs::path(".") : out_dir, a.gates, a.top);
}

}  // namespace

int main(int argc, char** argv) {
#if defined(__GLIBC__)
  // One malloc arena for all threads: memory one thread frees is reused by the others instead of
  // staying resident in its own arena. Peak RSS on df_index_resolver (54 MB JSON, 2 cores) fell
  // from 31.3 to 28.6 MiB (medians of 10), wall time unchanged (docs/benchmarks.md).
  mallopt(M_ARENA_MAX, 1);
#endif
  return ft::run_command_line("ft-diagnose", [&] { return run(argc, argv); });
}
