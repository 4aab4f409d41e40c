// device_query.cu: states the GPU peak FLOP/s that MFU is measured against (the device list is
// ft/core/device_query.h).
#include <cuda_runtime.h>

#include <fmt/format.h>

#include <string>
#include <vector>

#include "ft/trainer/model_backend.h"

// ---- MFU peaks -------------------------------------------------------------------------
namespace ft::trainer {

double cuda_peak_gflops(Precision p, bool tf32, int device, std::string* source) {
  cudaDeviceProp prop{};
  int sms = 0, clock_khz = 0;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device) != cudaSuccess) {
    cudaGetLastError();
    if (source) *source = "no CUDA device to read a peak from";
    return 0;
  }
  const std::string name = prop.name;
  const int sm = prop.major * 10 + prop.minor;
  // Dense tensor-core bf16/fp16 peak: NVIDIA's stated numbers for the Hopper SXM parts (132
  // SMs), else SMs x max clock x FLOP per clock per SM for the architecture.
  double bf16 = 0;
  std::string how;
  if (sm == 90 && sms == 132) {
    bf16 = 989400;
    how = "H100/H200 SXM dense bf16 spec 989.4 TFLOP/s";
  } else if (sm == 90 && sms == 114) {
    bf16 = 756500;
    how = "H100 PCIe dense bf16 spec 756.5 TFLOP/s";
  } else {
    const double per_clock = sm >= 90 ? 4096 : sm == 80 ? 2048 : sm >= 86 ? 1024 : 0;
    bf16 = sms * (clock_khz / 1e6) * per_clock;
    how = fmt::format("{} SMs x {:.2f} GHz x {:.0f} bf16 FLOP/clock/SM (sm_{})", sms,
                      clock_khz / 1e6, per_clock, sm);
  }
  double peak = bf16;
  if (p == Precision::kFp32) {
    if (tf32) {
      peak = bf16 / 2;
      how += ", TF32 = half of it";
    } else {
      const double lanes = sm == 80 ? 64 : 128;  // fp32 FMA lanes per SM
      peak = sms * (clock_khz / 1e6) * lanes * 2;
      how = fmt::format("{} SMs x {:.2f} GHz x {:.0f} fp32 FMA lanes x 2", sms, clock_khz / 1e6,
                        lanes);
    }
  }
  if (source) *source = fmt::format("{} on {}", how, name);
  return peak;
}

}  // namespace ft::trainer
