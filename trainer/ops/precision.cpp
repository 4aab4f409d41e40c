// precision.cpp: vectorised fp32 <-> bf16/fp16 conversions (AVX-512 where compiled in).
#include "ft/trainer/precision.h"

// GCC 12 reports a false -Wmaybe-uninitialized inside its own AVX-512 intrinsic headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "ft/core/error.h"

namespace ft::trainer {

Precision parse_precision(const std::string& s) {
  if (s == "fp32" || s == "f32") return Precision::kFp32;
  if (s == "bf16") return Precision::kBf16;
  if (s == "fp16" || s == "f16") return Precision::kFp16;
  throw ConfigError("unknown precision '" + s + "' (expected fp32, bf16 or fp16)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "?";
}

uint16_t fp32_to_bf16_scalar(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_fp32_scalar(uint16_t x) {
  uint32_t u = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

namespace {
constexpr size_t kParallelMin = 1 << 16;
}

void fp32_to_bf16(uint16_t* out, const float* in, size_t n) {
  const ptrdiff_t blocks = static_cast<ptrdiff_t>(n / 16);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (ptrdiff_t b = 0; b < blocks; ++b) {
#if defined(__AVX512BF16__)
    __m512 v = _mm512_loadu_ps(in + b * 16);
    __m256bh h = _mm512_cvtneps_pbh(v);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + b * 16), (__m256i)h);
#else
    for (int j = 0; j < 16; ++j) out[b * 16 + j] = fp32_to_bf16_scalar(in[b * 16 + j]);
#endif
  }
  for (size_t i = static_cast<size_t>(blocks) * 16; i < n; ++i) out[i] = fp32_to_bf16_scalar(in[i]);
}

void bf16_to_fp32(float* out, const uint16_t* in, size_t n) {
  const ptrdiff_t blocks = static_cast<ptrdiff_t>(n / 16);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (ptrdiff_t b = 0; b < blocks; ++b) {
#if defined(__AVX512F__)
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + b * 16));
    __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    _mm512_storeu_ps(out + b * 16, _mm512_castsi512_ps(w));
#else
    for (int j = 0; j < 16; ++j) out[b * 16 + j] = bf16_to_fp32_scalar(in[b * 16 + j]);
#endif
  }
  for (size_t i = static_cast<size_t>(blocks) * 16; i < n; ++i) out[i] = bf16_to_fp32_scalar(in[i]);
}

namespace {
// Scalar IEEE half conversions (round to nearest even) for CPUs without F16C.
inline uint16_t half_bits(float x) {
  const _Float16 h = static_cast<_Float16>(x);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
inline float half_value(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}
#if defined(__F16C__) && defined(__AVX2__)
constexpr size_t kHalfBlock = 8;
#else
constexpr size_t kHalfBlock = 1;
#endif
}  // namespace

void fp32_to_fp16(uint16_t* out, const float* in, size_t n) {
  const ptrdiff_t blocks = static_cast<ptrdiff_t>(n / kHalfBlock);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (ptrdiff_t b = 0; b < blocks; ++b) {
#if defined(__F16C__) && defined(__AVX2__)
    __m256 v = _mm256_loadu_ps(in + b * 8);
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + b * 8), h);
#else
    out[b] = half_bits(in[b]);
#endif
  }
  for (size_t i = static_cast<size_t>(blocks) * kHalfBlock; i < n; ++i) out[i] = half_bits(in[i]);
}

void fp16_to_fp32(float* out, const uint16_t* in, size_t n) {
  const ptrdiff_t blocks = static_cast<ptrdiff_t>(n / kHalfBlock);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (ptrdiff_t b = 0; b < blocks; ++b) {
#if defined(__F16C__) && defined(__AVX2__)
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + b * 8));
    _mm256_storeu_ps(out + b * 8, _mm256_cvtph_ps(h));
#else
    out[b] = half_value(in[b]);
#endif
  }
  for (size_t i = static_cast<size_t>(blocks) * kHalfBlock; i < n; ++i) out[i] = half_value(in[i]);
}

bool round_through_fp16(float* out, const float* in, size_t n) {
  const ptrdiff_t blocks = static_cast<ptrdiff_t>(n / kHalfBlock);
  int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n >= kParallelMin)
  for (ptrdiff_t b = 0; b < blocks; ++b) {
#if defined(__F16C__) && defined(__AVX2__)
    __m256 v = _mm256_loadu_ps(in + b * 8);
    __m256 r = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm256_storeu_ps(out + b * 8, r);
    // Non-finite iff exponent bits are all ones.
    __m256i bits = _mm256_and_si256(_mm256_castps_si256(r), _mm256_set1_epi32(0x7f800000));
    __m256i eq = _mm256_cmpeq_epi32(bits, _mm256_set1_epi32(0x7f800000));
    bad |= _mm256_movemask_epi8(eq) != 0;
#else
    const float r = half_value(half_bits(in[b]));
    out[b] = r;
    bad |= !std::isfinite(r);
#endif
  }
  for (size_t i = static_cast<size_t>(blocks) * kHalfBlock; i < n; ++i) {
    const float r = half_value(half_bits(in[i]));
    out[i] = r;
    bad |= !std::isfinite(r);
  }
  return bad != 0;
}

}  // namespace ft::trainer
