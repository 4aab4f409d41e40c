// cuda_ops.h: launchers of the CUDA kernels under trainer/cuda/ops/ (internal header; one op per
// .cu file).
//
// Conventions (as include/ft/trainer/ops.h, whose CPU kernels are the reference twins):
// raw device pointers, a shape comment on every tensor, row-major, N = B*T rows.
// X is the activation type: float, bf16 or fp16. Parameters, parameter gradients,
// LayerNorm statistics, log-sum-exps and losses are fp32; the math is fp32 throughout.
// Parameter-gradient outputs ACCUMULATE (+=); activation gradients are WRITTEN unless the
// op says "accumulates". Every launcher is asynchronous on `stream`; every reduction has a
// fixed order, so results are bitwise reproducible run to run.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ft::trainer::gpu {

using bf16 = __nv_bfloat16;
using fp16 = __half;

// ---- encoder (ops/encoder.cu) ----------------------------------------------------
// out (B,T,C) = wte[inp] (V,C) + wpe[t] (maxT,C). inp (B,T) on the device.
template <typename X>
void encoder_forward(X* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T,
                     int C, cudaStream_t stream);
// Positions of one micro-batch grouped by token, so that dwte is summed without atomics:
// order (B*T) lists positions token by token (ascending within a token), start (U+1) bounds
// bucket u, token (U) is bucket u's token id. Built on the host from the host inputs.
struct TokenBuckets {
  std::vector<int32_t> order, start, token;
  std::vector<int32_t> count;  // scratch (V+1)
  void build(const int32_t* inp, int n);  // inp (n) host
};
// dwte (V,C) += dout scattered by token; dwpe (maxT,C) += sum over b. Accumulates.
// order/start/token: TokenBuckets arrays on the device; num_buckets = U.
template <typename X>
void encoder_backward(float* dwte, float* dwpe, const X* dout, const int32_t* order,
                      const int32_t* start, const int32_t* token, int num_buckets, int B, int T,
                      int C, cudaStream_t stream);

// ---- layernorm (ops/layernorm.cu), eps 1e-5 --------------------------------------
// out (N,C), mean (N), rstd (N) from inp (N,C), weight (C), bias (C).
template <typename X>
void layernorm_forward(X* out, float* mean, float* rstd, const X* inp, const float* weight,
                       const float* bias, int N, int C, cudaStream_t stream);
// dinp (N,C) ACCUMULATES; dweight (C), dbias (C) accumulate.
// scratch: layernorm_backward_scratch(N, C) floats.
template <typename X>
void layernorm_backward(X* dinp, float* dweight, float* dbias, float* scratch, const X* dout,
                        const X* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C, cudaStream_t stream);
size_t layernorm_backward_scratch(int N, int C);

// ---- gelu, tanh approximation (ops/gelu.cu) --------------------------------------
// out (n) = gelu(inp (n)); may alias.
template <typename X>
void gelu_forward(X* out, const X* inp, size_t n, cudaStream_t stream);
// dinp (n) = dout (n) * gelu'(inp (n)); dinp may alias dout.
template <typename X>
void gelu_backward(X* dinp, const X* inp, const X* dout, size_t n, cudaStream_t stream);

// ---- residual (ops/residual.cu) ---------------------------------------------------
// out (n) = a (n) + b (n); out may alias a or b.
template <typename X>
void residual_forward(X* out, const X* a, const X* b, size_t n, cudaStream_t stream);

// ---- linear-layer bias (ops/bias.cu) ------------------------------------------------
// dbias (OC) += column sums of dout (N,OC). scratch: bias_backward_scratch(N, OC) floats.
template <typename X>
void bias_backward(float* dbias, float* scratch, const X* dout, int N, int OC, cudaStream_t stream);
size_t bias_backward_scratch(int N, int OC);
// out (N,OC) += bias (OC): the fallback when cuBLASLt has no bias epilogue for a shape.
template <typename X>
void add_bias(X* out, const float* bias, int N, int OC, cudaStream_t stream);

// ---- causal attention, flash-style (ops/attention.cu, ops/attention_tc.cu) --------
// qkv (B,T,3C) holds q | k | v, each (B,T,NH,HS), HS = C/NH. Never materialises
// (B,NH,T,T): tiles of keys stream through an online softmax.
// out (B,T,C); lse (B,NH,T) = each row's log-sum-exp of the scaled scores.
// bf16/fp16 with HS == 64 run on tensor cores (WMMA, P and dS rounded to X before their
// GEMMs, as FlashAttention-2); everything else on a warp-per-row fp32 kernel. HS <= 256.
template <typename X>
void attention_forward(X* out, float* lse, const X* qkv, int B, int T, int C, int NH,
                       cudaStream_t stream);
// dqkv (B,T,3C) written. dout (B,T,C), out (B,T,C) and lse (B,NH,T) from the forward.
// scratch (B,NH,T) floats: D = rowsum(dout * out). Recomputes probabilities tile by tile;
// dQ and dK/dV come from two kernels (no atomics: deterministic).
template <typename X>
void attention_backward(X* dqkv, float* scratch, const X* dout, const X* qkv, const X* out,
                        const float* lse, int B, int T, int C, int NH, cudaStream_t stream);
// Whether attention_{forward,backward}<X> take the tensor-core path for head size HS.
template <typename X>
bool attention_uses_tensor_cores(int HS);
// The tensor-core kernels (ops/attention_tc.cu); X is bf16 or fp16, HS == 64.
template <typename X>
void attention_forward_tc(X* out, float* lse, const X* qkv, int B, int T, int C, int NH,
                          cudaStream_t stream);
template <typename X>
void attention_backward_tc(X* dqkv, const float* d, const X* dout, const X* qkv, const float* lse,
                           int B, int T, int C, int NH, cudaStream_t stream);

// ---- fused softmax cross-entropy (ops/crossentropy.cu) ----------------------------
// logits (N,Vp), of which the first V columns are real. losses (N) = -log softmax[target];
// logits OVERWRITTEN with dlogits = dloss * (softmax - onehot(target)), 0 in the padding.
// targets (N) in [0, V), on the device. One pass to read, one to write.
template <typename X>
void crossentropy_forward_backward(X* logits, float* losses, const int32_t* targets, int N, int V,
                                   int Vp, float dloss, cudaStream_t stream);
// Forward only: losses (N); logits untouched.
template <typename X>
void crossentropy_forward(const X* logits, float* losses, const int32_t* targets, int N, int V,
                          int Vp, cudaStream_t stream);

// ---- reductions (ops/reduce.cu) -----------------------------------------------------
inline constexpr int kReducePartials = 1024;
// *out (device) = sum of x (n) in double. partials: kReducePartials doubles.
void sum_to_double(double* out, double* partials, const float* x, size_t n, cudaStream_t stream);
// *out (device) = sum of x (n)^2 in double. partials: kReducePartials doubles.
void sum_squares(double* out, double* partials, const float* x, size_t n, cudaStream_t stream);

// ---- AdamW (ops/adamw.cu) -----------------------------------------------------------
// One pass over params, grads, m, v (n) (fp32 master weights, as ops::adamw_update), and
// params_lp (n) = X(params) when non-null (the bf16/fp16 copy GEMMs read).
template <typename X>
void adamw_update(float* params, X* params_lp, const float* grads, float* m, float* v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay,
                  float grad_scale, int t, cudaStream_t stream);

// ---- casts (ops/cast.cu), round to nearest even ------------------------------------
template <typename X>
void cast_from_fp32(X* out, const float* in, size_t n, cudaStream_t stream);
template <typename X>
void cast_to_fp32(float* out, const X* in, size_t n, cudaStream_t stream);

// ---- test support (ops/fill.cu) ------------------------------------------------------
// Spins about `cycles` GPU clock cycles, then sets out (n) = value: a slow writer for
// stream-ordering tests.
void spin_then_fill(float* out, size_t n, float value, long long cycles, cudaStream_t stream);

}  // namespace ft::trainer::gpu
