// kineto_names.h: Kineto category/name rules shared by the reader and the HTA analyses.
#pragma once

#include <cstdint>
#include <string_view>

#include "ft/profiler/event.h"

namespace ft::profiler::kineto {

enum class Source : uint8_t {
  kKernel,      // kernel / Kernel / mtia_ccp_events
  kMemcpy,      // gpu_memcpy / Memcpy
  kMemset,      // gpu_memset / Memset
  kSync,        // cuda_sync
  kRuntime,     // cuda_runtime / Runtime / cuda_driver / mtia_runtime
  kCpuOp,       // cpu_op / Operator / python_function
  kAnnotation,  // user_annotation
  kGpuAnnotation,
  kOther,
};

struct SourceKind {
  Source source = Source::kOther;
  bool device = false;  // lives on a device track even without a stream
};

SourceKind classify_source(std::string_view cat, std::string_view name);
// ft category of an event; may set kPinned / kPageable / kSynchronous in *flags.
Category classify_event(SourceKind kind, std::string_view name, bool device, uint8_t* flags);
int64_t profiler_step_number(std::string_view name);  // "ProfilerStep#12" -> 12, else -1
uint64_t dtype_size(std::string_view dtype);          // "Float" -> 4, unknown -> 1

// HTA v0.6.1 kernel types (hta/utils/utils.py), tested in this order.
enum class HtaKernelType : uint8_t { kCommunication, kMemory, kComputation, kOther };
HtaKernelType hta_kernel_type(std::string_view name);
const char* hta_kernel_type_name(HtaKernelType t);

}  // namespace ft::profiler::kineto
