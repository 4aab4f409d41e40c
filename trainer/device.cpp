// device.cpp: parsing --device (the device list itself is ft/core/device_query.h).
#include "ft/trainer/device.h"

#include "ft/core/error.h"

namespace ft::trainer {

DeviceKind parse_device(const std::string& s) {
  if (s == "cpu") return DeviceKind::kCpu;
  if (s == "cuda" || s == "gpu") return DeviceKind::kCuda;
  throw ConfigError("unknown --device '" + s + "' (expected cpu or cuda)");
}

const char* device_name(DeviceKind d) { return d == DeviceKind::kCuda ? "cuda" : "cpu"; }

}  // namespace ft::trainer
