// run_cmd.cpp: `ft-diagnose run`: an in-process ft-train run under the profiler, with a progress
// bar.
#include "run_cmd.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_main.h"
#include "ft/app/training_profile.h"
#include "ft/core/comm_range.h"
#include "ft/core/error.h"
#include "ft/profiler/collectives.h"
#include "ft/profiler/multi_rank.h"
#include "ft/profiler/trace_reader.h"
#include "ft/profiler/trace_writer.h"
#include "ft/trainer/communicator.h"
#include "ft/trainer/launch.h"
#include "ft/trainer/trainer.h"
#include "memory_options.h"

namespace ft::diagnose {
namespace {

void progress_bar(int done, int total, double ms, bool profiled) {
  constexpr int kWidth = 30;
  const int fill = total > 0 ? done * kWidth / total : kWidth;
  std::fprintf(stderr, "\r[%s%s] step %d/%d  %.1f ms%s", std::string(fill, '#').c_str(),
               std::string(kWidth - fill, '.').c_str(), done, total, ms,
               profiled ? "  (profiled)" : "            ");
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

namespace fs = std::filesystem;

}  // namespace

int run_ranks(const std::vector<std::string>& train_args, const RunOptions& options, int ranks,
              const std::string& out_dir, bool* help) {
  *help = false;
  std::vector<const char*> argv = {"ft-diagnose run"};
  for (const auto& a : train_args) argv.push_back(a.c_str());
  auto parsed =
      trainer::parse_train_args(static_cast<int>(argv.size()), argv.data(), "ft-diagnose run");
  if (!parsed) {
    *help = true;
    return 0;
  }
  if (!parsed->trace.empty()) {
    throw ConfigError("ft-diagnose run writes DIR/trace.rankN.json: use --out DIR, not --trace");
  }
  if (!parsed->metrics.empty()) {
    throw ConfigError("ft-diagnose run --ranks writes DIR/metrics.rankN.jsonl: drop --metrics");
  }
  if (!trainer::mpi_supported()) {
    throw ConfigError(
        fmt::format("--ranks {} launches ft-train under mpirun, but this ft was built without MPI "
                    "(configure with -DFT_WITH_MPI=ON and install libopenmpi-dev)",
                    ranks));
  }
  const std::string mpirun = trainer::find_mpirun();
  if (mpirun.empty()) {
    throw ConfigError(fmt::format(
        "--ranks {} launches mpirun, which is not on PATH (Debian: apt-get install openmpi-bin; "
        "or set FT_MPIRUN)",
        ranks));
  }
  const fs::path ft_train = sibling_tool("FT_TRAIN", "ft-train");
  if (access(ft_train.c_str(), X_OK) != 0) {
    throw IoError(fmt::format("ft-train not found at {} (set FT_TRAIN)", ft_train.string()));
  }
  std::vector<std::string> cmd =
      trainer::mpirun_command(mpirun, ranks, ft_train.string(), train_args);
  const trainer::ParallelConfig& pc = parsed->parallel;
  if (pc.size() == 1) {
    cmd.insert(cmd.end(), {"--dp", std::to_string(ranks)});
    std::fprintf(stderr, "ft-diagnose: no --dp/--tp/--pp given: running data-parallel, --dp %d\n",
                 ranks);
  } else if (pc.size() != ranks) {
    throw ConfigError(fmt::format("--dp {} x --tp {} x --pp {} = {} processes, but --ranks {}",
                                  pc.dp, pc.tp, pc.pp, pc.size(), ranks));
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw IoError(fmt::format("cannot create '{}': {}", out_dir, ec.message()));
  // Stale rank files of an earlier run must not be mixed with this one.
  for (const auto& e : fs::directory_iterator(out_dir, ec)) {
    const std::string n = e.path().filename().string();
    if ((n.rfind("trace.rank", 0) == 0 || n.rfind("metrics.rank", 0) == 0) &&
        (n.ends_with(".json") || n.ends_with(".jsonl"))) {
      fs::remove(e.path(), ec);
    }
  }
  cmd.insert(cmd.end(), {"--trace", (fs::path(out_dir) / "trace.json").string(), "--metrics",
                         (fs::path(out_dir) / "metrics.jsonl").string()});
  if (!options.profile_steps.empty())
    cmd.insert(cmd.end(), {"--profile-steps", options.profile_steps});
  std::string line;
  for (const auto& w : cmd) line += (line.empty() ? "" : " ") + w;
  std::fprintf(stderr, "ft-diagnose: %s\n", line.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  std::vector<char*> av;
  for (auto& w : cmd) av.push_back(w.data());
  av.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw IoError(fmt::format("cannot fork for mpirun: {}", std::strerror(errno)));
  if (pid == 0) {
    trainer::allow_mpirun_as_root();
    execv(av[0], av.data());
    std::fprintf(stderr, "ft-diagnose: cannot execute %s: %s\n", av[0], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (rc != 0) {
    std::fprintf(stderr, "ft-diagnose: ft-train under mpirun failed (exit status %d)\n", rc);
    return rc;
  }
  if (pc.size() == 1) parsed->parallel.dp = ranks;
  add_rank_memory_options(*parsed, out_dir);
  return rc;
}

namespace {

// The data-parallel all-reduces' transfer per step: each all-reduce matched across the ranks
// (by its communicator group and sequence number), at its shortest duration over them (the
// others waited for the slowest rank as well); -1 when none match.
double all_reduce_transfer_ms(const std::vector<profiler::Trace>& traces) {
  std::vector<std::vector<profiler::CollectiveCall>> calls(traces.size());
  std::map<std::pair<size_t, size_t>, int64_t> step_of;  // (rank, call index) -> step
  for (size_t r = 0; r < traces.size(); ++r) {
    const profiler::Trace& t = traces[r];
    for (size_t i = 0; i < t.events.size(); ++i) {
      const profiler::Event& e = t.events[i];
      if (e.phase != profiler::Phase::kSpan || e.step < 0 || e.arg < 0 ||
          t.names.at(e.name) != "comm.all_reduce") {
        continue;
      }
      calls[r].push_back(
          {fmt::format("{}|{}", static_cast<int>(comm_range_group(e.arg)), comm_range_seq(e.arg)),
           e.ts_ns, e.dur_ns, i, 0, -1});
    }
  }
  std::map<int64_t, double> per_step;
  for (const profiler::MatchedCollective& m : profiler::match_collectives(calls)) {
    const auto& [r, call] = m.calls.front();
    per_step[traces[static_cast<size_t>(r)].events[call->ref].step] += m.transfer_ns / 1e6;
  }
  if (per_step.empty()) return -1;
  double sum = 0;
  for (const auto& [step, ms] : per_step) sum += ms;
  return sum / static_cast<double>(per_step.size());
}

}  // namespace

void add_rank_memory_options(const trainer::TrainConfig& config, const std::string& out_dir) {
  const std::vector<fs::path> paths = profiler::find_rank_traces(out_dir);
  std::vector<profiler::Trace> traces;
  for (const fs::path& path : paths) traces.push_back(profiler::read_trace_json(path));
  const double transfer_ms = all_reduce_transfer_ms(traces);
  for (size_t k = 0; k < paths.size(); ++k) {
    // DIR/trace.rankR.json beside DIR/metrics.rankR.jsonl, whose last line is the summary.
    std::string name = paths[k].filename().string();
    const size_t at = name.find(".rank");
    if (at == std::string::npos) continue;
    name.replace(0, at, "metrics");
    name.replace(name.size() - 5, 5, ".jsonl");
    std::ifstream in(fs::path(out_dir) / name);
    std::string line, last;
    while (std::getline(in, line)) {
      if (!line.empty()) last = line;
    }
    const nlohmann::json j = nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("summary")) continue;  // no summary: nothing to calibrate
    const nlohmann::json& s = j["summary"];
    const double peak = s.value("mem_peak", 0.0), step_ms = s.value("mean_step_ms", 0.0);
    const bool completed = s.value("ooms", 0) == 0 && s.value("steps", 0) > 0;
    add_memory_options(config, peak, step_ms, completed, &traces[k], transfer_ms);
    profiler::write_trace_json(traces[k], paths[k]);
  }
}

bool run_profiled(const std::vector<std::string>& train_args, const RunOptions& options,
                  profiler::Trace* out) {
  std::vector<const char*> argv = {"ft-diagnose run"};
  for (const auto& a : train_args) argv.push_back(a.c_str());
  auto parsed =
      trainer::parse_train_args(static_cast<int>(argv.size()), argv.data(), "ft-diagnose run");
  if (!parsed) return false;
  // --profile-steps is ft-diagnose's own flag; the trace always goes to DIR/trace.json.
  if (!parsed->trace.empty()) {
    throw ConfigError("ft-diagnose run writes DIR/trace.json: use --out DIR, not --trace");
  }
  app::TrainingProfile profile(options.profile_steps, /*quiet=*/true);
  trainer::Trainer t(*parsed);
  profile.start(t);
  const int steps = t.config().steps;
  std::string oom;
  int64_t oom_step = 0;
  double step_sum = 0;
  int counted = 0;
  while (!t.done()) {
    try {
      const trainer::StepMetrics m = t.step();
      oom_step = m.step + 1;
      if (m.step >= t.config().warmup_steps_excluded || counted == 0) {
        step_sum += m.step_ms;
        ++counted;
      }
      if (options.progress)
        progress_bar(m.step + 1, steps, m.step_ms, profile.window().contains(m.step));
    } catch (const OutOfMemoryError& e) {
      // The run cannot go on; what it recorded up to here is the evidence.
      oom = e.what();
      break;
    }
  }
  profiler::Trace trace = profile.finish(t);
  trace.source = "ft-diagnose run";
  add_memory_options(t.config(), static_cast<double>(t.memory_stats().peak_allocated),
                     counted ? step_sum / counted : 0, oom.empty() && counted > 0, &trace);
  if (!oom.empty()) {
    if (options.progress) std::fprintf(stderr, "\n");
    trace.metadata["run.oom"] = oom;
    trace.metadata["run.oom_step"] = std::to_string(oom_step);
  }
  *out = std::move(trace);
  return true;
}

}  // namespace ft::diagnose
