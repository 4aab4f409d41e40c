// gpu_test_kernels.h: kernels the GPU tests launch (defined in gpu_test_kernels.cu; no CUDA types).
#pragma once

#include <cstdint>

namespace ft::gputest {

// Keeps the device busy for `ns` nanoseconds (one thread spinning on %globaltimer) on `stream`
// (a cudaStream_t as void*).
void launch_spin(void* stream, int64_t ns);

}  // namespace ft::gputest
