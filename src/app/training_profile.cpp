// training_profile.cpp: one profiling path for ft-train --trace and ft-diagnose run.
#include "ft/app/training_profile.h"

#include <fmt/format.h>
#include <unistd.h>

#include <climits>
#include <fstream>

#include "ft/core/env_info.h"
#include "ft/core/error.h"
#include "ft/profiler/classifier.h"
#include "ft/trainer/matmul.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ft::app {
using namespace ft::profiler;  // NOLINT: this file glues the trainer to the profiler

namespace {

double read_load_average() {
  std::ifstream in("/proc/loadavg");
  double l = -1;
  if (!(in >> l)) return -1;
  return l;
}

std::string json_scalar(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

}  // namespace

namespace {

// Point-to-point messages carry floats: a timestamp travels as three exact 22-bit pieces.
constexpr int kClockTag = 0x7c10;
void put_ns(int64_t v, float* out) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 3; ++i) out[i] = static_cast<float>((u >> (22 * i)) & 0x3fffff);
}
int64_t get_ns(const float* in) {
  uint64_t u = 0;
  for (int i = 0; i < 3; ++i) u |= static_cast<uint64_t>(in[i]) << (22 * i);
  return static_cast<int64_t>(u);
}

}  // namespace

ClockOffset estimate_clock_offset(trainer::Communicator& world, int rounds) {
  ClockOffset c;
  const int n = world.world_size(), me = world.rank();
  if (n < 2 || rounds < 1) return c;
  c.measured = true;
  c.rounds = rounds;
  if (me == 0) c.error_ns = 0;  // the reference
  for (int peer = 1; peer < n; ++peer) {
    if (me != 0 && me != peer) continue;
    int64_t best_rtt = INT64_MAX;
    for (int k = 0; k < rounds; ++k) {
      float msg[6] = {};
      if (me == 0) {
        const int64_t t0 = now_ns();
        world.send(msg, 1, peer, kClockTag);
        world.recv(msg, 3, peer, kClockTag);
        const int64_t t3 = now_ns();
        put_ns(t0, msg);
        put_ns(t3, msg + 3);
        world.send(msg, 6, peer, kClockTag);
      } else {
        world.recv(msg, 1, 0, kClockTag);
        put_ns(now_ns(), msg);
        const int64_t t1 = get_ns(msg);
        world.send(msg, 3, 0, kClockTag);
        world.recv(msg, 6, 0, kClockTag);
        const int64_t t0 = get_ns(msg), t3 = get_ns(msg + 3);
        if (t3 - t0 < best_rtt) {
          best_rtt = t3 - t0;
          c.offset_ns = t1 - (t0 + (t3 - t0) / 2);
          c.error_ns = (t3 - t0 + 1) / 2;
        }
      }
    }
  }
  world.barrier();
  return c;
}

TrainingProfile::TrainingProfile(std::string_view window, bool quiet) : quiet_(quiet) {
  if (!window.empty()) window_ = parse_step_window(window);
}

void TrainingProfile::start(trainer::Trainer& t) {
  const int steps = t.config().steps;
  if (!window_.whole_run() && window_.first >= steps) {
    throw ConfigError(fmt::format("--profile-steps starts at step {} but the run has {} steps",
                                  window_.first, steps));
  }
  load_average_ = read_load_average();  // before our own threads add to it
  // Measured before training so that the probe does not disturb the steps.
  fault_costs_ = measure_page_fault_costs();
  // An fp32 run's precision finding predicts with its own GEMMs' bf16 speed-up.
  if (t.config().options.precision == trainer::Precision::kFp32) {
    gemm_speedup_ = measure_gemm_bf16_speedup(t.config());
  }
  // Before the session starts, so the clock exchange is not part of the profile.
  if (t.groups().world->world_size() > 1) clock_ = estimate_clock_offset(*t.groups().world);
  SessionOptions o;
  o.recorder.window = window_;
  o.quiet = quiet_;
  session_ = std::make_unique<Session>(o);
  session_->start();
  t.set_observer(session_->observer());
}

Trace TrainingProfile::finish(trainer::Trainer& t) {
  t.set_observer(nullptr);
  Trace trace = session_->collect();
  for (auto& [k, v] : run_metadata(t)) trace.metadata[k] = std::move(v);
  auto& md = trace.metadata;
  md["env.load_average"] = fmt::format("{:.2f}", load_average_);
  md[kMetaPageFaultNs] = fmt::format("{:.1f}", fault_costs_.small_ns);
  md[kMetaHugePageFaultNs] = fmt::format("{:.1f}", fault_costs_.huge_ns);
  if (gemm_speedup_.ratio > 0) {
    md["run.gemm_bf16_speedup"] = fmt::format("{:.3f}", gemm_speedup_.ratio);
    md["run.gemm_bf16_probe"] =
        fmt::format("{}: fp32 {:.3f} ms, bf16 {:.3f} ms (forward + backward, best of up to 5)",
                    gemm_speedup_.shapes, gemm_speedup_.fp32_ms, gemm_speedup_.bf16_ms);
  } else if (!gemm_speedup_.why_not.empty()) {
    md["run.gemm_bf16_probe"] = "not measured: " + gemm_speedup_.why_not;
  }
  md["run.page_fault_probe_faults"] =
      std::to_string(fault_costs_.small_faults + fault_costs_.huge_faults);
  if (clock_.measured) {
    md["run.clock_offset_ns"] = std::to_string(clock_.offset_ns);
    md["run.clock_offset_error_ns"] = std::to_string(clock_.error_ns);
    md["run.clock_sync_rounds"] = std::to_string(clock_.rounds);
  }
  return trace;
}

std::map<std::string, std::string> run_metadata(trainer::Trainer& t) {
  std::map<std::string, std::string> md;
  const trainer::TrainConfig& c = t.config();
  const nlohmann::json config = c.to_json();
  for (auto it = config.begin(); it != config.end(); ++it) {
    md["config." + it.key()] = json_scalar(*it);
  }
  const EnvInfo env = collect_env_info();
  md["env.cpu_model"] = env.cpu_model;
  md["env.logical_cpus"] = std::to_string(env.logical_cpus);
  md["env.vector_width"] = env.vector_width();
  md["env.vector_bits"] = std::to_string(env.avx512f ? 512 : env.avx2 ? 256 : 128);
  md["env.gemm_library"] = trainer::Gemm::library_info();
  const auto core = env.variables.find("OPENBLAS_CORETYPE");
  md["env.blas_core_type"] =
      core != env.variables.end() ? core->second : "unset (ft's GEMMs do not use OpenBLAS)";
  md["env.threads"] = std::to_string(c.threads);
#ifdef _OPENMP
  md["env.omp_max_threads"] = std::to_string(omp_get_max_threads());
  md["env.openmp"] = std::to_string(_OPENMP);
#endif
#if defined(__clang__)
  md["env.compiler"] = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  md["env.compiler"] = std::string("GCC ") + __VERSION__;
#else
  md["env.compiler"] = "unknown";
#endif
  md["env.hostname"] = env.hostname;
  md["env.kernel"] = env.kernel;
  for (const auto& [k, v] : env.variables) md["env.var." + k] = v;
  const AllocatorStats a = t.memory_stats();  // the engine's (host or device) allocator
  md["run.warmup_excluded"] = std::to_string(c.warmup_steps_excluded);
  // Where this rank sits in the parallel layout (multi-rank diagnosis, docs/classification.md).
  const trainer::ParallelGroups& g = t.groups();
  md["rank"] = std::to_string(g.world->rank());
  md["run.rank"] = md["rank"];
  md["run.world_size"] = std::to_string(g.world->world_size());
  md["run.dp_rank"] = std::to_string(g.dp_rank);
  md["run.tp_rank"] = std::to_string(g.tp_rank);
  md["run.pp_stage"] = std::to_string(g.pp_stage);
  md["run.straggle_rank"] = std::to_string(c.parallel.straggle_rank);  // fault injection
  md["run.straggle_work"] = std::to_string(c.parallel.straggle_work);
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
  return md;
}

}  // namespace ft::app
