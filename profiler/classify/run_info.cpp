// run_info.cpp: RunInfo from a trace's metadata ("config.*", "env.*", "run.*" keys).
#include <cstdlib>
#include <string>

#include "ft/profiler/findings.h"

namespace ft::profiler {
namespace {

bool number(const std::map<std::string, std::string>& m, const std::string& key, double* out) {
  const auto it = m.find(key);
  if (it == m.end() || it->second.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str()) return false;
  *out = v;
  return true;
}

template <typename T>
void read(const std::map<std::string, std::string>& m, const std::string& key, T* out) {
  double v = 0;
  if (number(m, key, &v)) *out = static_cast<T>(v);
}

std::string text(const std::map<std::string, std::string>& m, const std::string& key) {
  const auto it = m.find(key);
  return it == m.end() ? std::string() : it->second;
}

}  // namespace

RunInfo RunInfo::from_metadata(const std::map<std::string, std::string>& m) {
  RunInfo r;
  r.precision = text(m, "config.precision");
  r.checkpoint = text(m, "config.checkpoint");
  r.h2d = text(m, "config.h2d");
  read(m, "config.micro_batch", &r.micro_batch);
  read(m, "config.seq_len", &r.seq_len);
  read(m, "config.grad_accum", &r.grad_accum);
  read(m, "config.steps", &r.steps);
  read(m, "config.warmup", &r.warmup);
  read(m, "config.threads", &r.threads);
  read(m, "config.loader_workers", &r.loader_workers);
  read(m, "config.prefetch", &r.prefetch);
  read(m, "run.gemm_bf16_speedup", &r.gemm_bf16_speedup);
  read(m, "config.lr", &r.lr);
  read(m, "config.clip", &r.clip);
  read(m, "config.memory_limit", &r.memory_limit);
  read(m, "run.warmup_excluded", &r.warmup_excluded);
  const std::string caching = text(m, "config.allocator_caching");
  if (!caching.empty()) r.allocator_caching = caching != "false" && caching != "0";
  const std::string huge = text(m, "config.allocator_huge_pages");
  if (!huge.empty()) r.allocator_huge_pages = huge != "false" && huge != "0";
  read(m, "run.mfu", &r.mfu);
  read(m, "run.memory_capacity", &r.memory_capacity);
  read(m, "run.mem_peak", &r.mem_peak);
  read(m, "run.mem_reserved_peak", &r.mem_reserved_peak);
  read(m, "run.alloc_retries", &r.alloc_retries);
  read(m, "run.ooms", &r.ooms);
  r.oom = text(m, "run.oom");
  read(m, "run.oom_step", &r.oom_step);
  read(m, "run.segment_maps", &r.segment_maps);
  read(m, "run.segment_unmaps", &r.segment_unmaps);
  read(m, "env.logical_cpus", &r.logical_cpus);
  read(m, "env.load_average", &r.load_average);
  read(m, "env.vector_bits", &r.cpu_vector_bits);
  r.gemm_library = text(m, "env.gemm_library");
  const std::string prefix = "env.var.";
  for (auto it = m.lower_bound(prefix); it != m.end() && it->first.rfind(prefix, 0) == 0; ++it) {
    r.env_vars[it->first.substr(prefix.size())] = it->second;
  }
  const std::string mo = "run.memory_option.";
  for (auto it = m.lower_bound(mo); it != m.end() && it->first.rfind(mo, 0) == 0; ++it) {
    const std::string rest = it->first.substr(mo.size());
    const size_t dot = rest.rfind('.');
    if (dot == std::string::npos) continue;
    RunInfo::MemoryOption& o = r.memory_options[rest.substr(0, dot)];
    const std::string field = rest.substr(dot + 1);
    if (field == "peak") read(m, it->first, &o.peak);
    if (field == "step_ms") read(m, it->first, &o.step_ms);
    if (field == "basis") o.basis = it->second;
  }
  return r;
}

}  // namespace ft::profiler
