// run_cmd.cpp: `ft-diagnose run`: an in-process ft-train run under the recorder, with a progress
// bar.
#include "run_cmd.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "ft/core/env_info.h"
#include "ft/core/error.h"
#include "ft/profiler/classifier.h"
#include "ft/trainer/matmul.h"
#include "ft/trainer/trainer.h"
#include "temp_recorder.h"

namespace ft::diagnose {
namespace {

std::string json_scalar(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double l = -1;
  if (!(in >> l)) return -1;
  return l;
}

int vector_bits(const EnvInfo& e) { return e.avx512f ? 512 : e.avx2 ? 256 : 128; }

void progress_bar(int done, int total, double ms, bool profiled) {
  constexpr int kWidth = 30;
  const int fill = total > 0 ? done * kWidth / total : kWidth;
  std::fprintf(stderr, "\r[%s%s] step %d/%d  %.1f ms%s", std::string(fill, '#').c_str(),
               std::string(kWidth - fill, '.').c_str(), done, total, ms,
               profiled ? "  (profiled)" : "");
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace

void parse_profile_steps(const std::string& text, RunOptions* out) {
  int a = 0, b = 0;
  char dash = 0;
  char rest = 0;
  if (std::sscanf(text.c_str(), "%d%c%d%c", &a, &dash, &b, &rest) != 3 || dash != '-' || a < 0 ||
      b < a) {
    throw ConfigError(fmt::format("--profile-steps '{}': expected A-B with 0 <= A <= B", text));
  }
  out->profile_first = a;
  out->profile_last = b;
}

bool run_profiled(const std::vector<std::string>& train_args, const RunOptions& options,
                  profiler::Trace* out) {
  std::vector<const char*> argv = {"ft-diagnose run"};
  for (const auto& a : train_args) argv.push_back(a.c_str());
  auto parsed =
      trainer::parse_train_args(static_cast<int>(argv.size()), argv.data(), "ft-diagnose run");
  if (!parsed) return false;
  const double load = load_average();  // before our own threads add to it
  // Measured before training so the probe does not disturb the steps.
  int64_t probe_faults = 0;
  const double fault_ns = profiler::measure_page_fault_ns(size_t{32} << 20, 3, &probe_faults);
  trainer::Trainer t(*parsed);
  const trainer::TrainConfig& c = t.config();
  if (options.profile_first >= c.steps) {
    throw ConfigError(fmt::format("--profile-steps starts at step {} but the run has {} steps",
                                  options.profile_first, c.steps));
  }
  TempRecorder rec;
  const int first = options.profile_first < 0 ? 0 : options.profile_first;
  const int last =
      options.profile_last < 0 ? c.steps - 1 : std::min(options.profile_last, c.steps - 1);
  double mfu_sum = 0;
  int mfu_n = 0;
  size_t peak = 0, reserved_peak = 0;
  while (!t.done()) {
    const int s = t.next_step();
    const bool profiled = s >= first && s <= last;
    if (profiled) set_range_sink(&rec);
    const trainer::StepMetrics m = t.step();
    if (profiled) {
      set_range_sink(nullptr);
      rec.counter(profiler::kCounterLoss, m.step, m.loss);
      rec.counter(profiler::kCounterLr, m.step, m.lr);
      rec.counter(profiler::kCounterGradNorm, m.step, m.grad_norm);
      rec.counter(profiler::kCounterMemAllocated, m.step, static_cast<double>(m.mem_allocated));
      rec.counter(profiler::kCounterMemReserved, m.step, static_cast<double>(m.mem_reserved));
      rec.counter(profiler::kCounterTokensPerS, m.step, m.tokens_per_s);
      rec.counter("mfu", m.step, m.mfu);
      rec.counter("data_ms", m.step, m.data_ms);
      if (s - first >= c.warmup_steps_excluded || last - first < c.warmup_steps_excluded) {
        mfu_sum += m.mfu;
        ++mfu_n;
      }
    }
    peak = std::max(peak, m.mem_peak);
    reserved_peak = std::max(reserved_peak, m.mem_reserved);
    if (options.progress) progress_bar(s + 1, c.steps, m.step_ms, profiled);
  }
  profiler::Trace trace = rec.take();
  auto& md = trace.metadata;
  const nlohmann::json config = c.to_json();
  for (auto it = config.begin(); it != config.end(); ++it)
    md["config." + it.key()] = json_scalar(*it);
  const EnvInfo env = collect_env_info();
  md["env.cpu_model"] = env.cpu_model;
  md["env.logical_cpus"] = std::to_string(env.logical_cpus);
  md["env.vector_width"] = env.vector_width();
  md["env.vector_bits"] = std::to_string(vector_bits(env));
  md["env.gemm_library"] = trainer::Gemm::library_info();
  md["env.load_average"] = fmt::format("{:.2f}", load);
  md["env.hostname"] = env.hostname;
  md["env.kernel"] = env.kernel;
  for (const auto& [k, v] : env.variables) md["env.var." + k] = v;
  const AllocatorStats a = t.allocator().stats();
  md["run.profiled_steps"] = std::to_string(last - first + 1);
  md["run.profile_steps"] = fmt::format("{}-{}", first, last);
  md["run.warmup_excluded"] = std::to_string(c.warmup_steps_excluded);
  md["run.mfu"] = fmt::format("{:.6g}", mfu_n ? mfu_sum / mfu_n : 0.0);
  md["run.peak_gflops"] = fmt::format("{:.6g}", t.peak_gflops());
  md["run.mem_peak"] = std::to_string(a.peak_allocated);
  md["run.mem_reserved_peak"] = std::to_string(a.peak_reserved);
  md["run.alloc_retries"] = std::to_string(a.cache_flush_retries);
  md["run.ooms"] = std::to_string(a.ooms);
  md["run.segment_maps"] = std::to_string(a.segment_maps);
  md["run.segment_unmaps"] = std::to_string(a.segment_unmaps);
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const double avail = pages > 0 && page > 0 ? static_cast<double>(pages) * page : 0;
  md["run.memory_capacity"] = fmt::format(
      "{:.0f}", c.memory_limit ? static_cast<double>(c.memory_limit) : avail + a.peak_reserved);
  md[profiler::kMetaPageFaultNs] = fmt::format("{:.1f}", fault_ns);
  md["run.page_fault_probe_faults"] = std::to_string(probe_faults);
  *out = std::move(trace);
  return true;
}

}  // namespace ft::diagnose
