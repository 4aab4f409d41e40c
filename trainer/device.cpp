// device.cpp: device discovery; without FT_WITH_CUDA it honestly reports that CUDA is not built in.
#include "ft/trainer/device.h"

#include "ft/core/error.h"

namespace ft::trainer {

#if FT_WITH_CUDA
// Implemented in trainer/cuda/device_query.cu.
std::vector<CudaDeviceInfo> cuda_query_devices(std::string* reason);
#endif

DeviceKind parse_device(const std::string& s) {
  if (s == "cpu") return DeviceKind::kCpu;
  if (s == "cuda" || s == "gpu") return DeviceKind::kCuda;
  throw ConfigError("unknown --device '" + s + "' (expected cpu or cuda)");
}

const char* device_name(DeviceKind d) { return d == DeviceKind::kCuda ? "cuda" : "cpu"; }

bool built_with_cuda() { return FT_WITH_CUDA; }

std::vector<CudaDeviceInfo> cuda_devices(std::string* reason) {
#if FT_WITH_CUDA
  return cuda_query_devices(reason);
#else
  if (reason) *reason = "ft was built without FT_WITH_CUDA";
  return {};
#endif
}

}  // namespace ft::trainer
