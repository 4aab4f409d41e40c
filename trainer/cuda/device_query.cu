// device_query.cu: lists CUDA devices; any runtime error (no driver, no device) means "no device".
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "ft/trainer/device.h"

namespace ft::trainer {

std::vector<CudaDeviceInfo> cuda_query_devices(std::string* reason) {
  std::vector<CudaDeviceInfo> out;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
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
  return out;
}

}  // namespace ft::trainer
