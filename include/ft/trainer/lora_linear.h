// lora_linear.h: QLoRA's linear layer: a frozen NF4 weight plus a trainable low-rank adapter,
// out = x W^T + b + (alpha / r) * (drop(x) A^T) B^T, W dequantized a tile of rows at a time.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ft/trainer/nf4.h"

namespace ft::trainer {
class Gemm;
}

namespace ft::trainer {

struct LoraShape {
  int N = 0;           // rows of x (B*T)
  int IC = 0, OC = 0;  // W is (OC, IC)
  int rank = 0;        // r: A is (r, IC), B is (OC, r); 0: no adapter (A, B, h unused)
  float scale = 1;     // alpha / r
  float dropout = 0;   // p of the adapter's input dropout (the mask is the caller's)
  // The frozen weight's GEMMs in bf16: W's tiles are dequantized into bf16 operands and x (or
  // dout) converted once, fp32 accumulation (Gemm::bf16_gemm); the adapter's stay fp32.
  bool bf16 = false;
};

inline constexpr int kLoraTileRows = 64;  // rows of W dequantized at once (64 x IC floats)

// Floats of workspace the calls below need: one tile of W, and drop(x) when a mask is given.
size_t lora_workspace_floats(const LoraShape& s, bool dropout_mask);

// out (N,OC) = x (N,IC) W^T + bias (OC; may be null) + scale * h B^T, with h (N,r) = drop(x) A^T
// written for the backward. keep (N,IC; null: no dropout) is 1 where x is kept; kept values are
// scaled by 1 / (1 - p). W is read a tile of kLoraTileRows rows at a time; never whole.
// `gemm` runs the bf16 GEMMs (needed when s.bf16; may be null otherwise).
void lora_linear_forward(float* out, float* h, const float* x, const Nf4Tensor& w,
                         const float* bias, const float* A, const float* B, const uint8_t* keep,
                         const LoraShape& s, float* workspace, Gemm* gemm = nullptr);

// Given dout (N,OC): dx (N,IC) = dout W + scale * ((dout B) A) masked as drop(x) was (written;
// skipped when null), dA (r,IC) += scale * (dout B)^T drop(x), dB (OC,r) += scale * dout^T h.
// W is frozen: it gets no gradient.
void lora_linear_backward(float* dx, float* dA, float* dB, const float* dout, const float* x,
                          const float* h, const Nf4Tensor& w, const float* A, const float* B,
                          const uint8_t* keep, const LoraShape& s, float* workspace,
                          Gemm* gemm = nullptr);

// Dropout keep-mask for n inputs (1: kept) with drop probability p, drawn from `key` alone:
// the same key gives the same mask, so a recomputed forward needs no stored mask.
void lora_dropout_mask(uint8_t* keep, size_t n, float p, uint64_t key);

}  // namespace ft::trainer
