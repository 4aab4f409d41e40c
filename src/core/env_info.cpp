// env_info.cpp: reads /proc/cpuinfo, uname and the environment variables that matter for speed.
#include "ft/core/env_info.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace ft {

std::string EnvInfo::vector_width() const {
  if (avx512f) return "512-bit (AVX-512)";
  if (avx2) return "256-bit (AVX2)";
  return "128-bit or less";
}

nlohmann::json EnvInfo::to_json() const {
  return {{"cpu_model", cpu_model},
          {"vendor", vendor},
          {"cpu_family", cpu_family},
          {"cpu_model_number", cpu_model_number},
          {"logical_cpus", logical_cpus},
          {"isa",
           {{"avx2", avx2},
            {"avx512f", avx512f},
            {"avx512_bf16", avx512_bf16},
            {"avx512_fp16", avx512_fp16},
            {"amx_bf16", amx_bf16}}},
          {"vector_width", vector_width()},
          {"hostname", hostname},
          {"kernel", kernel},
          {"variables", variables}};
}

EnvInfo collect_env_info() {
  EnvInfo e;
  e.logical_cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  std::set<std::string> flags;
  while (std::getline(cpuinfo, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && e.cpu_model.empty()) e.cpu_model = value;
    if (key == "vendor_id" && e.vendor.empty()) e.vendor = value;
    if (key == "cpu family" && e.cpu_family < 0) e.cpu_family = std::atoi(value.c_str());
    if (key == "model" && e.cpu_model_number < 0) e.cpu_model_number = std::atoi(value.c_str());
    if (key == "flags" && flags.empty()) {
      std::istringstream in(value);
      std::string f;
      while (in >> f) flags.insert(f);
    }
  }
  e.avx2 = flags.count("avx2");
  e.avx512f = flags.count("avx512f");
  e.avx512_bf16 = flags.count("avx512_bf16");
  e.avx512_fp16 = flags.count("avx512_fp16");
  e.amx_bf16 = flags.count("amx_bf16");
  utsname u{};
  if (uname(&u) == 0) {
    e.hostname = u.nodename;
    e.kernel = std::string(u.sysname) + " " + u.release;
  }
  for (const char* name : {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS",
                           "OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "LD_PRELOAD", "LD_LIBRARY_PATH",
                           "MALLOC_CONF", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
    if (const char* v = std::getenv(name)) e.variables[name] = v;
  }
  return e;
}

}  // namespace ft
