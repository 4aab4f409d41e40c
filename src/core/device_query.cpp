// device_query.cpp: lists CUDA devices through the runtime (any error, no driver or no device, means
// "no device"); without FT_WITH_CUDA it honestly reports that CUDA is not built in.
#include "ft/core/device_query.h"

#if FT_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ft {

bool built_with_cuda() { return FT_WITH_CUDA; }

std::vector<CudaDeviceInfo> cuda_devices(std::string* reason) {
  std::vector<CudaDeviceInfo> out;
#if FT_WITH_CUDA
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (reason) {
      *reason = std::string("cudaGetDeviceCount: error ") + std::to_string(static_cast<int>(err)) +
                " (" + cudaGetErrorName(err) + ")";
    }
    cudaGetLastError();  // clear the sticky error
    return out;
  }
  if (count == 0 && reason) *reason = "no CUDA device";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    CudaDeviceInfo d;
    d.index = i;
    d.name = prop.name;
    d.sm_major = prop.major;
    d.sm_minor = prop.minor;
    d.total_memory = prop.totalGlobalMem;
    out.push_back(d);
  }
#else
  if (reason) *reason = "ft was built without FT_WITH_CUDA";
#endif
  return out;
}

}  // namespace ft
