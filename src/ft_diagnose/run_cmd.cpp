// run_cmd.cpp: `ft-diagnose run`: an in-process ft-train run under the profiler, with a progress
// bar.
#include "run_cmd.h"

#include <cstdio>
#include <string>

#include "ft/core/error.h"
#include "ft/profiler/training_profile.h"
#include "ft/trainer/trainer.h"

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

}  // namespace

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
  profiler::TrainingProfile profile(options.profile_steps, /*quiet=*/true);
  trainer::Trainer t(*parsed);
  profile.start(t);
  const int steps = t.config().steps;
  while (!t.done()) {
    const trainer::StepMetrics m = t.step();
    if (options.progress)
      progress_bar(m.step + 1, steps, m.step_ms, profile.window().contains(m.step));
  }
  profiler::Trace trace = profile.finish(t);
  trace.source = "ft-diagnose run";
  *out = std::move(trace);
  return true;
}

}  // namespace ft::diagnose
