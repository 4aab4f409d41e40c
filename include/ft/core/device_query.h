// device_query.h: which CUDA devices this process can see (empty without CUDA or a device).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ft {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  size_t total_memory = 0;
};

// CUDA devices visible to this process. Empty when ft was built without CUDA or when the
// runtime reports any error (no driver, no device: treated alike); then *reason (if given)
// says why, e.g. "cudaGetDeviceCount: error 35 (...)".
std::vector<CudaDeviceInfo> cuda_devices(std::string* reason = nullptr);
bool built_with_cuda();

}  // namespace ft
