// nf4.cpp: NF4 block quantization with double-quantized absmaxes (nf4.h).
#include "ft/trainer/nf4.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ft/core/error.h"
#include "ft/trainer/precision.h"

namespace ft::trainer {
namespace {

// float32 values of the normalized quantiles (the table bitsandbytes and the paper publish;
// tests/nf4_test.cpp re-derives them from the normal quantile function).
constexpr std::array<float, 16> kNf4 = {-1.0f,        -0.69619280f, -0.52507305f, -0.39491749f,
                                        -0.28444138f, -0.18477343f, -0.09105004f, 0.0f,
                                        0.07958030f,  0.16093020f,  0.24611230f,  0.33791524f,
                                        0.44070983f,  0.56261700f,  0.72295684f,  1.0f};

}  // namespace

const std::array<float, 16>& nf4_codes() { return kNf4; }

uint8_t nf4_nearest(float x) {
  // The first code above x, then the nearer of it and the one below.
  const auto hi = std::upper_bound(kNf4.begin(), kNf4.end(), x);
  if (hi == kNf4.begin()) return 0;
  if (hi == kNf4.end()) return 15;
  const auto lo = hi - 1;
  return static_cast<uint8_t>((x - *lo <= *hi - x ? lo : hi) - kNf4.begin());
}

uint8_t float_to_e4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  float a = std::fabs(x);
  if (std::isnan(a)) throw Error("float_to_e4m3: NaN");
  if (a >= kE4m3Max) return sign | 0x7e;  // 448 = 1.75 x 2^8 (0x7f is NaN)
  // Subnormals: multiples of 2^-9 below 2^-6.
  if (a < std::ldexp(1.0f, -6)) {
    const auto m = static_cast<int>(std::nearbyint(std::ldexp(a, 9)));  // 0..8 (8: min normal)
    return sign | static_cast<uint8_t>(m);
  }
  int e = 0;
  const float f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  // 1.mmm x 2^(e-1): the mantissa in eighths, rounded to nearest even by nearbyint.
  auto m = static_cast<int>(std::nearbyint((2 * f - 1) * 8));
  int exp = e - 1;
  if (m == 8) m = 0, ++exp;
  const int biased = exp + 7;
  if (biased > 15 || (biased == 15 && m > 6)) return sign | 0x7e;
  return sign | static_cast<uint8_t>(biased << 3 | m);
}

float e4m3_to_float(uint8_t b) {
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  const int biased = (b >> 3) & 0xf, m = b & 7;
  if (biased == 15 && m == 7) return std::nanf("");
  if (biased == 0) return sign * std::ldexp(static_cast<float>(m), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(m) / 8.0f, biased - 7);
}

float Nf4Tensor::absmax(size_t b) const {
  const float c2 = absmax_c2[b / kNf4AbsmaxBlock];
  return absmax_mean + c2 * e4m3_to_float(absmax8[b]) / kE4m3Max;
}

size_t Nf4Tensor::bytes() const {
  return codes.size() + absmax8.size() + absmax_c2.size() * sizeof(float) + sizeof(float);
}

Nf4Tensor quantize_nf4(const float* w, size_t n, CachingAllocator* alloc) {
  Nf4Tensor q;
  q.n = n;
  q.codes = Nf4Tensor::Vec<uint8_t>(CachedStdAllocator<uint8_t>(alloc, "nf4.codes"));
  q.absmax8 = Nf4Tensor::Vec<uint8_t>(CachedStdAllocator<uint8_t>(alloc, "nf4.absmax"));
  q.absmax_c2 = Nf4Tensor::Vec<float>(CachedStdAllocator<float>(alloc, "nf4.scales"));
  const size_t blocks = (n + kNf4Block - 1) / kNf4Block;
  std::vector<float> absmax(blocks, 0.0f);
  for (size_t b = 0; b < blocks; ++b) {
    const size_t end = std::min(n, (b + 1) * kNf4Block);
    for (size_t i = b * kNf4Block; i < end; ++i) {
      if (!std::isfinite(w[i])) {
        throw Error(fmt::format("quantize_nf4: weight {} is {}", i, w[i]));
      }
      absmax[b] = std::max(absmax[b], std::fabs(w[i]));
    }
  }
  // Double quantization: mean-centred absmaxes, per 256 blocks scaled onto E4M3's range.
  double mean = 0;
  for (float a : absmax) mean += a;
  q.absmax_mean = blocks ? static_cast<float>(mean / static_cast<double>(blocks)) : 0.0f;
  q.absmax8.resize(blocks);
  q.absmax_c2.resize((blocks + kNf4AbsmaxBlock - 1) / kNf4AbsmaxBlock);
  for (size_t g = 0; g < q.absmax_c2.size(); ++g) {
    const size_t lo = g * kNf4AbsmaxBlock, hi = std::min(blocks, lo + kNf4AbsmaxBlock);
    float c2 = 0;
    for (size_t b = lo; b < hi; ++b) c2 = std::max(c2, std::fabs(absmax[b] - q.absmax_mean));
    q.absmax_c2[g] = c2;
    for (size_t b = lo; b < hi; ++b) {
      q.absmax8[b] =
          c2 > 0 ? float_to_e4m3((absmax[b] - q.absmax_mean) / c2 * kE4m3Max) : uint8_t{0};
    }
  }
  // The codes, against the absmax as it will be restored (so the rounding of the absmax does
  // not push a weight's code off its nearest).
  q.codes.assign((n + 1) / 2, 0);
  for (size_t b = 0; b < blocks; ++b) {
    const float a = q.absmax(b);
    const size_t end = std::min(n, (b + 1) * kNf4Block);
    for (size_t i = b * kNf4Block; i < end; ++i) {
      const uint8_t c = a > 0 ? nf4_nearest(std::clamp(w[i] / a, -1.0f, 1.0f)) : uint8_t{7};
      q.codes[i / 2] |= static_cast<uint8_t>(i % 2 ? c << 4 : c);
    }
  }
  return q;
}

namespace {

template <typename Store>
void dequantize_range(const Nf4Tensor& q, size_t first, size_t count, Store store) {
  if (first > q.n || count > q.n - first) {
    throw Error(fmt::format("dequantize_nf4: range [{}, {}) outside {} weights", first,
                            first + count, q.n));
  }
  size_t i = first;
  const size_t end = first + count;
  while (i < end) {
    const size_t b = i / kNf4Block, block_end = std::min(end, (b + 1) * kNf4Block);
    const float a = q.absmax(b);
    for (; i < block_end; ++i) {
      const uint8_t c = (q.codes[i / 2] >> (i % 2 ? 4 : 0)) & 0xf;
      store(i - first, a * kNf4[c]);
    }
  }
}

}  // namespace

void dequantize_nf4(const Nf4Tensor& q, size_t first, size_t count, float* out) {
  dequantize_range(q, first, count, [out](size_t k, float v) { out[k] = v; });
}

void dequantize_nf4_bf16(const Nf4Tensor& q, size_t first, size_t count, uint16_t* out) {
  dequantize_range(q, first, count, [out](size_t k, float v) { out[k] = fp32_to_bf16_scalar(v); });
}

}  // namespace ft::trainer
