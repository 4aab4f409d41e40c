// matmul.h: linear-layer GEMMs through oneDNN in fp32, bf16 (fp32 accumulate) or emulated fp16.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ft/core/allocator.h"
#include "ft/trainer/precision.h"

namespace ft::trainer {

// Low-precision shadow of a weight matrix, as kept by the model:
//   bf16: uint16 bf16 bits; fp16: fp32 values already rounded to fp16.
// Null for fp32.
using LowPrecisionWeight = const void*;

// Cumulative GEMM counters (for the profiler and benchmarks).
struct GemmStats {
  uint64_t calls = 0;
  double flops = 0;
  uint64_t primitives_created = 0;
};

// Executes the three GEMMs of a linear layer. Primitives are created once per
// shape and cached; operand conversion scratch and oneDNN's scratchpad come
// from the caching allocator, so a steady-state step touches no fresh memory.
//
// fp16 on this CPU: oneDNN 2.6 has no f16 matmul on x86, so fp16 mode rounds
// both operands to fp16 values (overflow becomes inf, as a real fp16 tensor
// would) and multiplies them exactly in fp32 with fp32 accumulation. That is
// numerically what an fp16 GEMM with fp32 accumulation computes; it is not
// faster than fp32.
class Gemm {
 public:
  explicit Gemm(CachingAllocator& alloc);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // out (N,OC) = inp (N,IC) @ weight (OC,IC)^T + bias (OC); bias may be null.
  void forward(float* out, const float* inp, const float* weight, LowPrecisionWeight weight_lp,
               const float* bias, int N, int IC, int OC, Precision p);

  // dinp (N,IC) = dout (N,OC) @ weight (OC,IC), written; skipped when dinp is null.
  // dweight (OC,IC) = dout^T @ inp, or += when accumulate_dweight.
  // dbias (OC) += column sums of dout; skipped when null.
  void backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                const float* weight, LowPrecisionWeight weight_lp, int N, int IC, int OC,
                bool accumulate_dweight, Precision p);

  // bf16 only: out (N,OC) as bf16 bits = inp (N,IC) @ weight^T, no bias. Used for
  // the LM head, whose (N,Vp) logits are the largest tensor of a step.
  void forward_bf16_out(uint16_t* out, const float* inp, LowPrecisionWeight weight_lp, int N,
                        int IC, int OC);
  // bf16 only: backward with dout (N,OC) already in bf16 bits.
  void backward_bf16_dout(float* dinp, float* dweight, const uint16_t* dout, const float* inp,
                          LowPrecisionWeight weight_lp, int N, int IC, int OC,
                          bool accumulate_dweight);

  // bf16 operands already converted, fp32 accumulation: C (M,N) = A (M,K) B (K,N), or += when
  // `accumulate`. A's element (i, k) is at a[i * a_rs + k * a_cs], B's (k, j) at
  // b[k * b_rs + j * b_cs] (a transposed or column-sliced view is strides). C is contiguous.
  // For callers that convert their own operands (QLoRA's NF4 tiles).
  void bf16_gemm(float* c, const uint16_t* a, int64_t a_rs, int64_t a_cs, const uint16_t* b,
                 int64_t b_rs, int64_t b_cs, int M, int K, int N, bool accumulate);
  // Peak bytes one call takes from the allocator at once, as the call would route it: the
  // converted operands (bf16 / fp16) plus oneDNN's scratchpad, each rounded to `round_to`
  // like the caching allocator's blocks. For memory prediction (tuner); creates the oneDNN
  // primitive descriptors it needs but runs nothing.
  enum class Call { kForward, kBackward, kForwardBf16Out, kBackwardBf16Dout };
  static size_t transient_bytes(Call call, int N, int IC, int OC, Precision p, bool has_bias,
                                bool accumulate_dweight, size_t round_to = 512);

  const GemmStats& stats() const { return stats_; }
  // The oneDNN implementation chosen for the last-created primitive (e.g. "brg:avx512_core_amx_bf16").
  std::string last_impl() const;
  // oneDNN's runtime version string and the maximum ISA it may dispatch to.
  static std::string library_info();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  GemmStats stats_;
};

}  // namespace ft::trainer
