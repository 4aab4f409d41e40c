// diagnosis.cpp: names of the wait classes and severities of the diagnosis model.
#include "ft/profiler/diagnosis.h"

namespace ft::profiler {

const char* wait_class_name(WaitClass c) {
  switch (c) {
    case WaitClass::kCompute: return "compute";
    case WaitClass::kData: return "data";
    case WaitClass::kPcie: return "pcie";
    case WaitClass::kComm: return "comm";
    case WaitClass::kMemory: return "memory";
    case WaitClass::kHost: return "host";
    case WaitClass::kSync: return "sync";
    case WaitClass::kOther: return "other";
  }
  return "other";
}

const char* severity_name(Severity s) {
  switch (s) {
    case Severity::kInfo: return "info";
    case Severity::kWarning: return "warning";
    case Severity::kCritical: return "critical";
  }
  return "info";
}

}  // namespace ft::profiler
