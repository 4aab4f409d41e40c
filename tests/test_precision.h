// test_precision.h: the reduced precision the scenario tests run in: bf16 where this CPU has bf16
// GEMMs, else fp32 (bf16 is only emulated there, and slower: the diagnosis says so).
#pragma once

#include <string>

#include "ft/trainer/matmul.h"

namespace ft::test {

inline bool bf16_native() {
  return trainer::Gemm::library_info().find("bf16 emulated") == std::string::npos;
}

// " --precision bf16" or " --precision fp32".
inline std::string fast_precision_flag() {
  return bf16_native() ? " --precision bf16" : " --precision fp32";
}

}  // namespace ft::test
