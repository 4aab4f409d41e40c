// device.h: the backend/device seam: which devices exist and which backend a run uses.
#pragma once

#include <string>
#include <vector>

#include "ft/core/device_query.h"

namespace ft::trainer {

enum class DeviceKind { kCpu, kCuda };

DeviceKind parse_device(const std::string& s);  // "cpu" | "cuda"; throws ConfigError
const char* device_name(DeviceKind d);

using ft::built_with_cuda;  // ft/core/device_query.h
using ft::cuda_devices;
using ft::CudaDeviceInfo;

}  // namespace ft::trainer
