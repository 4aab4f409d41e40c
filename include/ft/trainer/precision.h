// precision.h: training precision modes and fp32 <-> bf16/fp16 conversion kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ft::trainer {

enum class Precision { kFp32, kBf16, kFp16 };

Precision parse_precision(const std::string& s);  // throws ConfigError
const char* precision_name(Precision p);

// Round-to-nearest-even conversions. n elements. Parallel (OpenMP) for large n.
void fp32_to_bf16(uint16_t* out, const float* in, size_t n);
void bf16_to_fp32(float* out, const uint16_t* in, size_t n);
void fp32_to_fp16(uint16_t* out, const float* in, size_t n);
void fp16_to_fp32(float* out, const uint16_t* in, size_t n);
// Rounds fp32 values to the nearest fp16 value and back in place (values
// beyond 65504 become inf, as an fp16 store would). Returns true if any
// result is non-finite.
bool round_through_fp16(float* out, const float* in, size_t n);

// Scalar helpers (tests, references).
uint16_t fp32_to_bf16_scalar(float x);
float bf16_to_fp32_scalar(uint16_t x);

}  // namespace ft::trainer
