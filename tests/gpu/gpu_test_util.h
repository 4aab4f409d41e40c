// gpu_test_util.h: shared by the GPU tests: skip without a device, a busy kernel for overlap.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "ft/trainer/device.h"
#include "gpu_test_kernels.h"

namespace ft::gputest {

// True when a CUDA device is usable; otherwise *why says why (any runtime error counts).
inline bool gpu_available(std::string* why) {
  std::string reason;
  if (!ft::trainer::cuda_devices(&reason).empty()) return true;
  *why = reason.empty() ? std::string("no CUDA device") : reason;
  return false;
}

}  // namespace ft::gputest

// Skips the test, with the reason, when there is no CUDA device.
#define FT_REQUIRE_GPU()                                      \
  do {                                                        \
    std::string ft_gpu_why_;                                  \
    if (!::ft::gputest::gpu_available(&ft_gpu_why_)) {        \
      GTEST_SKIP() << "needs a CUDA device: " << ft_gpu_why_; \
    }                                                         \
  } while (0)
