// engine_test_util.h: helpers of the GPU tests: skip without a device, NaN-filled device buffers, X
// <-> fp32 copies, tolerance checks.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "../../trainer/cuda/cuda_ops.h"
#include "ft/trainer/device.h"
#include "ft/trainer/precision.h"

// Skips the test (reported by ctest as skipped) when no CUDA device is usable.
#define FT_REQUIRE_GPU()                               \
  do {                                                 \
    std::string ft_why_;                               \
    if (ft::trainer::cuda_devices(&ft_why_).empty()) { \
      GTEST_SKIP() << "no CUDA device: " << ft_why_;   \
    }                                                  \
  } while (0)

#define FT_TEST_CUDA(expr)                                                       \
  do {                                                                           \
    const cudaError_t ft_e_ = (expr);                                            \
    ASSERT_EQ(ft_e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(ft_e_); \
  } while (0)

namespace ft::test::gpu {

using ft::trainer::gpu::bf16;
using ft::trainer::gpu::fp16;

template <typename X>
const char* type_name() {
  if constexpr (std::is_same_v<X, float>) return "fp32";
  if constexpr (std::is_same_v<X, bf16>) return "bf16";
  return "fp16";
}

// Element tolerances of one rounding to X (outputs stored in X): relative, and absolute as a
// fraction of the reference tensor's largest magnitude.
template <typename X>
struct Tol {
  static constexpr double rel = std::is_same_v<X, float>  ? 1e-4
                                : std::is_same_v<X, bf16> ? 1.6e-2
                                                          : 2e-3;
  static constexpr double abs = std::is_same_v<X, float>  ? 1e-5
                                : std::is_same_v<X, bf16> ? 8e-3
                                                          : 1e-3;
};

// Device memory of n X, filled with NaN bit patterns (0xFF bytes are NaN in fp32, bf16 and
// fp16), so an element a kernel forgets to write fails the comparison.
template <typename X>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    if (cudaMalloc(&ptr_, std::max<size_t>(n, 1) * sizeof(X)) != cudaSuccess) ptr_ = nullptr;
    if (ptr_) cudaMemset(ptr_, 0xFF, std::max<size_t>(n, 1) * sizeof(X));
  }
  ~DeviceArray() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  X* get() const { return static_cast<X*>(ptr_); }
  size_t size() const { return n_; }

 private:
  void* ptr_ = nullptr;
  size_t n_;
};

// fp32 values rounded to X and back (what the device sees of host data).
template <typename X>
std::vector<float> round_to(const std::vector<float>& v) {
  if constexpr (std::is_same_v<X, float>) {
    return v;
  } else {
    std::vector<uint16_t> bits(v.size());
    std::vector<float> out(v.size());
    if constexpr (std::is_same_v<X, bf16>) {
      ft::trainer::fp32_to_bf16(bits.data(), v.data(), v.size());
      ft::trainer::bf16_to_fp32(out.data(), bits.data(), v.size());
    } else {
      ft::trainer::fp32_to_fp16(bits.data(), v.data(), v.size());
      ft::trainer::fp16_to_fp32(out.data(), bits.data(), v.size());
    }
    return out;
  }
}

// Copies fp32 host values to the device as X (rounded to nearest even).
// A CUDA error (e.g. a kernel fault surfacing at a copy) fails the test with its name.
inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    ADD_FAILURE() << what << ": " << cudaGetErrorName(e) << " (" << cudaGetErrorString(e) << ")";
}

template <typename X>
void upload(X* dst, const std::vector<float>& v) {
  if constexpr (std::is_same_v<X, float>) {
    check_cuda(cudaMemcpy(dst, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice),
               "upload");
  } else {
    std::vector<uint16_t> bits(v.size());
    if constexpr (std::is_same_v<X, bf16>) {
      ft::trainer::fp32_to_bf16(bits.data(), v.data(), v.size());
    } else {
      ft::trainer::fp32_to_fp16(bits.data(), v.data(), v.size());
    }
    check_cuda(cudaMemcpy(dst, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice), "upload");
  }
}

template <typename X>
std::vector<float> download(const X* src, size_t n) {
  check_cuda(cudaDeviceSynchronize(), "kernels before a download");
  std::vector<float> out(n);
  if constexpr (std::is_same_v<X, float>) {
    check_cuda(cudaMemcpy(out.data(), src, n * sizeof(float), cudaMemcpyDeviceToHost), "download");
  } else {
    std::vector<uint16_t> bits(n);
    check_cuda(cudaMemcpy(bits.data(), src, n * 2, cudaMemcpyDeviceToHost), "download");
    if constexpr (std::is_same_v<X, bf16>) {
      ft::trainer::bf16_to_fp32(out.data(), bits.data(), n);
    } else {
      ft::trainer::fp16_to_fp32(out.data(), bits.data(), n);
    }
  }
  return out;
}

inline std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Every element finite (NaN = unwritten) and |got - want| <= abs_frac * max|want| + rel * |want|.
inline ::testing::AssertionResult close(const std::vector<float>& got,
                                        const std::vector<float>& want, double rel,
                                        double abs_frac) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  double scale = 0;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  const double atol = abs_frac * std::max(scale, 1e-30);
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (!std::isfinite(g)) {
      return ::testing::AssertionFailure()
             << "element " << i << " is " << g << " (unwritten or overflow), want " << w;
    }
    const double err = std::fabs(g - w);
    worst = std::max(worst, err / (atol + rel * std::fabs(w)));
    if (err > atol + rel * std::fabs(w)) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad) {
    return ::testing::AssertionFailure()
           << bad << " of " << got.size() << " elements out of tolerance (rel " << rel << ", abs "
           << atol << "); first at " << first << ": got " << got[first] << " want " << want[first]
           << "; worst error/tolerance " << worst;
  }
  return ::testing::AssertionSuccess();
}

// Relative L2 error ||got - want|| / ||want|| (whole-tensor comparison of gradients).
inline double rel_l2(const float* got, const float* want, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace ft::test::gpu
