// cublaslt_gemm.h: the linear-layer GEMMs on cuBLASLt (internal header; cublaslt_gemm.cu is the one
// place cuBLASLt is called).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "device_allocator.h"
#include "ft/trainer/matmul.h"

namespace ft::trainer::gpu {

enum class DType { kF32, kBF16, kF16 };
const char* dtype_name(DType t);
size_t dtype_bytes(DType t);

// fp32 operands: plain fp32 (bitwise the classic SGEMM contract) or TF32 tensor cores.
// bf16/fp16 operands always accumulate in fp32.
enum class GemmMath { kFp32, kTf32 };

// Row-major linear layers as the CPU Gemm (include/ft/trainer/matmul.h), on one stream.
// A plan (matmul descriptor, layouts, heuristic algorithm) is cached per shape, types,
// pointer alignments and epilogue; the workspace comes from the device allocator once.
class LtGemm {
 public:
  LtGemm(DeviceCachingAllocator& alloc, cudaStream_t stream, size_t workspace_bytes = 32u << 20);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // out (N,OC) of out_t = inp (N,IC) @ weight (OC,IC)^T + bias (OC, fp32; null: none).
  // inp and weight are in_t. The bias rides cuBLASLt's bias epilogue when the heuristic
  // offers one for the shape (with the fp32 bias, else with bias_d: the same bias in out_t,
  // when given; cuBLASLt 13.1 on an H200 takes only that one for a 16-bit out), else a separate
  // add kernel.
  void forward(void* out, DType out_t, const void* inp, const void* weight, DType in_t,
               const float* bias, int N, int IC, int OC, const void* bias_d = nullptr);
  // dinp (N,IC) of out_t = dout (N,OC) @ weight (OC,IC); += when accumulate.
  void backward_input(void* dinp, DType out_t, const void* dout, const void* weight, DType in_t,
                      int N, int IC, int OC, bool accumulate = false);
  // dweight (OC,IC) fp32 = dout^T (OC,N) @ inp (N,IC); += when accumulate.
  void backward_weight(float* dweight, const void* dout, const void* inp, DType in_t, int N, int IC,
                       int OC, bool accumulate);

  void set_math(GemmMath m) { math_ = m; }
  GemmMath math() const { return math_; }
  cudaStream_t stream() const { return stream_; }
  const GemmStats& stats() const { return stats_; }
  size_t cached_plans() const;
  // Forward calls whose bias went through the epilogue / through the fallback kernel.
  uint64_t bias_epilogue_calls() const { return bias_epilogue_calls_; }
  uint64_t bias_kernel_calls() const { return bias_kernel_calls_; }
  // cuBLASLt's version, e.g. "cuBLASLt 13.0.0".
  static std::string library_info();

 private:
  struct Plan;
  struct Impl;
  // Column-major D (m,n) = alpha op(A) op(B) + beta D (cuBLASLt's convention).
  void matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* a, DType a_t,
              int64_t lda, const void* b, DType b_t, int64_t ldb, void* d, DType d_t, int64_t ldd,
              float beta, const float* bias, int bias_rows, const void* bias_d = nullptr);

  DeviceCachingAllocator& alloc_;
  cudaStream_t stream_;
  GemmMath math_ = GemmMath::kFp32;
  DeviceBuffer<char> workspace_;
  GemmStats stats_;
  uint64_t bias_epilogue_calls_ = 0, bias_kernel_calls_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ft::trainer::gpu
