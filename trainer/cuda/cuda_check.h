// cuda_check.h: the one place CUDA runtime errors become ft::Error (device code only, never a public header).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "ft/core/error.h"

#define FT_CUDA_CHECK(expr)                                                               \
  do {                                                                                    \
    cudaError_t ft_cuda_err_ = (expr);                                                    \
    if (ft_cuda_err_ != cudaSuccess) {                                                    \
      throw ::ft::Error(std::string(#expr) + ": " + cudaGetErrorName(ft_cuda_err_) + " (" + \
                        cudaGetErrorString(ft_cuda_err_) + ") at " + __FILE__ + ":" +     \
                        std::to_string(__LINE__));                                        \
    }                                                                                     \
  } while (0)
