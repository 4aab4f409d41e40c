// env_info.h: what machine and environment a run is on (CPU, vector ISA, threads, BLAS-related variables).
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace ft {

struct EnvInfo {
  std::string cpu_model;
  std::string vendor;   // /proc/cpuinfo vendor_id: "GenuineIntel", "AuthenticAMD", ...
  int cpu_family = -1;  // /proc/cpuinfo "cpu family" (AMD Zen 5: 26), -1 when absent
  int cpu_model_number = -1;  // /proc/cpuinfo "model"
  int logical_cpus = 0;
  bool avx2 = false, avx512f = false, avx512_bf16 = false, avx512_fp16 = false, amx_bf16 = false;
  std::string hostname;
  std::string kernel;
  // Variables that change GEMM or allocator behaviour: OPENBLAS_CORETYPE,
  // OPENBLAS_L2_SIZE, OMP_NUM_THREADS, LD_PRELOAD, MALLOC_CONF, ... (only those set).
  std::map<std::string, std::string> variables;
  std::string vector_width() const;  // "512-bit (AVX-512)" / "256-bit (AVX2)"
  nlohmann::json to_json() const;
};

EnvInfo collect_env_info();

}  // namespace ft
