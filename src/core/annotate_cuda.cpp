// annotate_cuda.cpp: NVTX names for CUDA streams (the one place ft calls nvtxNameCudaStreamA).
#include "ft/core/annotate.h"

#if FT_WITH_NVTX && FT_WITH_CUDA
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExtCudaRt.h>
#endif

namespace ft {

void name_cuda_stream(void* stream, const char* name) noexcept {
#if FT_WITH_NVTX && FT_WITH_CUDA
  // Without an attached tool (NVTX_INJECTION64_PATH) the call returns at once.
  if (name != nullptr) nvtxNameCudaStreamA(static_cast<cudaStream_t>(stream), name);
#else
  (void)stream, (void)name;
#endif
}

}  // namespace ft
