// nf4.h: 4-bit NormalFloat (NF4) weights as QLoRA stores them: blocks of 64 weights as 4-bit codes
// scaled by the block's absmax, the absmaxes double-quantized to 8-bit floats in blocks of 256.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ft/core/std_allocator.h"

namespace ft::trainer {

inline constexpr size_t kNf4Block = 64;         // weights per absmax (QLoRA's block size)
inline constexpr size_t kNf4AbsmaxBlock = 256;  // absmaxes per second-level constant

// The 16 NF4 values (QLoRA, Dettmers et al. 2023, appendix E), ascending: the quantiles of a
// standard normal at 8 equal-probability points of each half (7 on the negative side, plus 0),
// normalized to [-1, 1]. Code i is nf4_codes()[i].
const std::array<float, 16>& nf4_codes();
// The code nearest to x (x in [-1, 1]; ties to the lower code).
uint8_t nf4_nearest(float x);

// OCP FP8 E4M3 (1 sign, 4 exponent bits with bias 7, 3 mantissa bits, subnormals, max 448, no
// infinities): the 8-bit float the absmaxes are stored in. Round to nearest even; beyond 448
// saturates.
uint8_t float_to_e4m3(float x);
float e4m3_to_float(uint8_t b);
inline constexpr float kE4m3Max = 448.0f;

// An NF4 tensor of n weights. Each block b of 64 weights stores codes q and the absmax a_b; w is
// restored as a_b * nf4_codes()[q]. The absmaxes are stored as QLoRA's double quantization: their
// mean m is subtracted, and each block of 256 of them is scaled by its largest |a - m| (fp32, c2)
// onto E4M3's range: a_b ~ m + c2 * e4m3(byte) / 448.
struct Nf4Tensor {
  size_t n = 0;
  // Held by the CachingAllocator quantize_nf4 was given (the global heap otherwise).
  template <typename T>
  using Vec = std::vector<T, CachedStdAllocator<T>>;
  Vec<uint8_t> codes;     // (n + 1) / 2 bytes: weight 2i in the low nibble, 2i+1 high
  Vec<uint8_t> absmax8;   // one E4M3 byte per block of 64
  Vec<float> absmax_c2;   // one fp32 scale per 256 blocks
  float absmax_mean = 0;  // m

  size_t blocks() const { return absmax8.size(); }
  // The absmax of block b as stored (after double quantization).
  float absmax(size_t b) const;
  // Bytes held: codes, absmax bytes, scales and the mean (~4.127 bits per weight).
  size_t bytes() const;
};

// Quantizes w[0..n). Non-finite weights are an error (Error naming the index). The result's
// storage comes from `alloc` when given (counted in its statistics and budget).
Nf4Tensor quantize_nf4(const float* w, size_t n, CachingAllocator* alloc = nullptr);
// Restores weights [first, first + count) into out (fp32), or as bf16 bits (round to nearest
// even) for a GEMM operand; only the blocks that range touches are read.
void dequantize_nf4(const Nf4Tensor& q, size_t first, size_t count, float* out);
void dequantize_nf4_bf16(const Nf4Tensor& q, size_t first, size_t count, uint16_t* out);

}  // namespace ft::trainer
