// ops.h: the CPU reference kernels of the GPT engine, one op per file under trainer/ops/.
//
// Conventions (llm.c style): raw float pointers, a shape comment on every
// tensor, row-major. N = B*T rows. Parameter-gradient outputs are always
// ACCUMULATED (+=). Activation-gradient outputs are WRITTEN (=) unless the
// op says "accumulates". All ops are deterministic for a fixed thread count
// and parallelise with OpenMP.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ft::trainer::ops {

// ---- encoder: token + position embedding ----------------------------------
// out (B,T,C) = wte[inp[b,t]] (V,C) + wpe[t] (maxT,C)
void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe,
                     int B, int T, int C);
// dwte (V,C) += scatter(dout), dwpe (maxT,C) += sum_b dout. Accumulates.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                      int B, int T, int C);

// ---- layernorm ---------------------------------------------------------------
// out (N,C), mean (N), rstd (N) from inp (N,C), weight (C), bias (C); eps = 1e-5.
// mean/rstd may be null (inference / recompute without saving).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C);
// dinp (N,C) ACCUMULATES (it is the residual stream's gradient);
// dweight (C), dbias (C) accumulate; either may be null (a frozen LayerNorm).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C);

// ---- gelu (tanh approximation, as GPT-2) ---------------------------------------
// out (n) = gelu(inp (n)). out may alias inp.
void gelu_forward(float* out, const float* inp, size_t n);
// dinp (n) = dout (n) * gelu'(inp). dinp may alias dout.
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);

// ---- residual ---------------------------------------------------------------------
// out (n) = a (n) + b (n). out may alias a or b. (Backward is the identity.)
void residual_forward(float* out, const float* a, const float* b, size_t n);

// ---- causal multi-head attention, materialised ------------------------------------
// qkv (B,T,3C) holds q | k | v, each (B,T,NH,HS) with HS = C/NH.
// out (B,T,C); att (B,NH,T,T) saves the softmax probabilities (upper triangle zero).
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);
// dqkv (B,T,3C) written; datt_scratch (B,NH,T,T) is unused (may be null): the kernel keeps per-thread tiles
// (it currently uses a per-thread (T,T) buffer instead, which stays in cache).
void attention_backward(float* dqkv, float* datt_scratch, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH);

// ---- causal multi-head attention, memory-efficient (tiled online softmax) ---------
// Never materialises (B,NH,T,T): works in tiles of at most kFlashTile x kFlashTile.
// out (B,T,C); lse (B,NH,T) saves each row's log-sum-exp of the scaled scores.
inline constexpr int kFlashTile = 64;
void attention_flash_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                             int NH);
// dqkv (B,T,3C) written. Recomputes probabilities tile by tile from lse.
// Needs `out` (B,T,C) for D_i = rowsum(dout * out).
void attention_flash_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                              const float* lse, int B, int T, int C, int NH);

// ---- fused softmax + cross-entropy ------------------------------------------------
// logits (N,Vp) in, of which the first V columns are real (Vp >= V is padding).
// losses (N) = -log softmax(logits)[target]. Then logits is OVERWRITTEN with
// dlogits = dloss * (softmax - onehot(target)) over the first V columns, 0 in
// the padding. targets (N) in [0,V). Returns the sum of losses (double).
double crossentropy_forward_backward(float* logits, float* losses, const int32_t* targets,
                                     int N, int V, int Vp, float dloss);
// Forward only (validation): losses (N); logits untouched. Returns the sum.
double crossentropy_forward(const float* logits, float* losses, const int32_t* targets, int N,
                            int V, int Vp);

// bf16 variants for the bf16 LM head (as PyTorch autocast, logits are bf16; the
// softmax and loss are computed in fp32): logits (N,Vp) are bf16 bits and are
// overwritten in place with bf16 dlogits. Same contract as above otherwise.
double crossentropy_forward_backward_bf16(uint16_t* logits, float* losses,
                                          const int32_t* targets, int N, int V, int Vp,
                                          float dloss);
double crossentropy_forward_bf16(const uint16_t* logits, float* losses, const int32_t* targets,
                                 int N, int V, int Vp);

// ---- AdamW --------------------------------------------------------------------------
// One fused pass over a flat parameter range. params, grads, m, v (n).
// grad_scale multiplies grads first (e.g. 1/loss_scale times clip factor).
// weight_decay is decoupled (p -= lr*wd*p) and applied only where the caller
// passes wd != 0 (no decay on biases and LayerNorm). t is the 1-based step.
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                  int t);

// ---- reductions ---------------------------------------------------------------------
// Sum of squares of x (n), accumulated in double.
double sum_squares(const float* x, size_t n);
// True if any element is inf or NaN.
bool has_nonfinite(const float* x, size_t n);

}  // namespace ft::trainer::ops
