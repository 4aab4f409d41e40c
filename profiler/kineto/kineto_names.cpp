// kineto_names.cpp: Kineto category/name rules shared by the reader and the HTA analyses.
#include "kineto_names.h"

#include <charconv>

namespace ft::profiler::kineto {
namespace {

bool starts(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool has(std::string_view s, std::string_view p) { return s.find(p) != std::string_view::npos; }

bool is_collective_name(std::string_view n) {
  return starts(n, "nccl") || starts(n, "c10d::") || starts(n, "gloo:") ||
         has(n, "record_param_comms") || starts(n, "hccl");
}

// User annotations that name a collective or waiting for one (TorchRec's "## all2all_...:wait ##",
// "## sparse_data_dist ##", DDP's "allreduce").
bool is_collective_annotation(std::string_view n) {
  return has(n, "all2all") || has(n, "all_to_all") || has(n, "allreduce") || has(n, "all_reduce") ||
         has(n, "allgather") || has(n, "all_gather") || has(n, "reduce_scatter") ||
         has(n, "sparse_data_dist");
}

// Operators in traces without a category (legacy autograd profiler): aten/prim ops, autograd
// engine and backward nodes ("AddmmBackward0"), torch:: functions. User record_function names
// match none of these and stay kOther.
bool is_legacy_op_name(std::string_view n) {
  if (starts(n, "aten::") || starts(n, "prim::") || starts(n, "autograd::") ||
      starts(n, "torch::") || n == "detach_") {
    return true;
  }
  size_t end = n.size();
  while (end > 0 && n[end - 1] >= '0' && n[end - 1] <= '9') --end;
  return end < n.size() && n.substr(0, end).size() > 8 && n.substr(end - 8, 8) == "Backward" &&
         !has(n, " ");
}

}  // namespace

SourceKind classify_source(std::string_view cat, std::string_view name) {
  SourceKind k;
  if (cat == "kernel" || cat == "Kernel" || cat == "mtia_ccp_events") {
    k.source = Source::kKernel;
    k.device = true;
  } else if (cat == "gpu_memcpy" || cat == "Memcpy") {
    k.source = Source::kMemcpy;
    k.device = true;
  } else if (cat == "gpu_memset" || cat == "Memset") {
    k.source = Source::kMemset;
    k.device = true;
  } else if (cat == "cuda_sync") {
    k.source = Source::kSync;
    k.device = true;
  } else if (cat == "gpu_user_annotation") {
    k.source = Source::kGpuAnnotation;
    k.device = true;
  } else if (cat == "cuda_runtime" || cat == "Runtime" || cat == "cuda_driver" ||
             cat == "mtia_runtime") {
    k.source = Source::kRuntime;
  } else if (cat == "cpu_op" || cat == "Operator" || cat == "python_function") {
    k.source = Source::kCpuOp;
  } else if (cat == "user_annotation") {
    k.source = Source::kAnnotation;
  } else {
    k.source = Source::kOther;
  }
  (void)name;
  return k;
}

Category classify_event(SourceKind kind, std::string_view name, bool device, uint8_t* flags) {
  if (starts(name, "ProfilerStep#")) return Category::kStep;
  switch (kind.source) {
    case Source::kKernel:
      if (starts(name, "dma")) return has(name, "DEVICE_TO_HOST") ? Category::kD2H : Category::kH2D;
      if (is_collective_name(name) || has(name, "ncclKernel") || has(name, "ncclDevKernel"))
        return Category::kComm;
      return Category::kCompute;
    case Source::kMemcpy:
      if (has(name, "Pageable")) *flags |= kPageable;
      if (has(name, "Pinned")) *flags |= kPinned;
      if (has(name, "HtoD")) return Category::kH2D;
      if (has(name, "DtoH")) return Category::kD2H;
      return Category::kD2D;
    case Source::kMemset:
      return Category::kMemset;
    case Source::kSync:
      return Category::kSync;
    case Source::kRuntime:
      if (has(name, "Synchronize") || has(name, "StreamWait") || has(name, "EventQuery")) {
        *flags |= kSynchronous;
        return Category::kSync;
      }
      // The allocator's device calls (PyTorch's caching allocator on a miss or a flush):
      // cudaFree and hipFree synchronize the device, their Async forms do not.
      if (has(name, "Malloc") || has(name, "Free")) {
        if (has(name, "Free") && !has(name, "Async")) *flags |= kSynchronous;
        return Category::kAlloc;
      }
      if ((has(name, "Memcpy") && !has(name, "Async")) || has(name, "MemcpyWithStream"))
        *flags |= kSynchronous;
      return Category::kHost;
    default:
      break;
  }
  if (has(name, "DataLoader")) return Category::kData;
  if (kind.source == Source::kAnnotation && is_collective_annotation(name)) return Category::kComm;
  if (starts(name, "Optimizer.") || has(name, "optimizer.step") || has(name, "Optimizer.step"))
    return Category::kOptimizer;
  if (is_collective_name(name)) return Category::kComm;
  if (device) return Category::kOther;
  if (kind.source == Source::kCpuOp) return Category::kCompute;
  if (kind.source == Source::kOther && is_legacy_op_name(name)) return Category::kCompute;
  return Category::kOther;
}

int64_t profiler_step_number(std::string_view name) {
  constexpr std::string_view kPrefix = "ProfilerStep#";
  if (!starts(name, kPrefix)) return -1;
  int64_t n = -1;
  const char* b = name.data() + kPrefix.size();
  const auto r = std::from_chars(b, name.data() + name.size(), n);
  return r.ec == std::errc() ? n : -1;
}

uint64_t dtype_size(std::string_view d) {
  if (d == "Float" || d == "Int" || d == "float32" || d == "int32") return 4;
  if (d == "Double" || d == "Long" || d == "float64" || d == "int64") return 8;
  if (d == "Half" || d == "BFloat16" || d == "Short" || d == "float16" || d == "bfloat16") return 2;
  return 1;
}

HtaKernelType hta_kernel_type(std::string_view n) {
  if (starts(n, "nccl") || starts(n, "hip") || starts(n, "hccl") || has(n, "ncclKernel"))
    return HtaKernelType::kCommunication;
  if (starts(n, "Memcpy") || starts(n, "Memset") || starts(n, "hipMemcpy") ||
      starts(n, "hipMemset") || starts(n, "dma"))
    return HtaKernelType::kMemory;
  // Not compute (HTA's ComputeKernelGroupingPattern, matched from the name's start): runtime
  // calls, syncs, copies, DMA, and MTIA's job, packet, PE and subgraph executions.
  if (has(n, "Memcpy") || has(n, "Memset") || has(n, "dma") || has(n, "Sync") ||
      starts(n, "Stream Wait Event") || starts(n, "runFunction") ||
      (starts(n, "cuda") && has(n, "LaunchKernel")) || starts(n, "job_exe") ||
      starts(n, "packet") || starts(n, "pe_exe") || starts(n, "cpum_exe_subgraph") ||
      starts(n, "collective_subgraph_execution"))
    return HtaKernelType::kOther;
  return HtaKernelType::kComputation;
}

const char* hta_kernel_type_name(HtaKernelType t) {
  switch (t) {
    case HtaKernelType::kCommunication:
      return "COMMUNICATION";
    case HtaKernelType::kMemory:
      return "MEMORY";
    case HtaKernelType::kComputation:
      return "COMPUTATION";
    default:
      return "OTHER";
  }
}

}  // namespace ft::profiler::kineto
