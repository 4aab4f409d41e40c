// nf4_test.cpp: NF4 block quantization (QLoRA) with double-quantized absmaxes: the code table,
// the 8-bit float of the absmaxes, and the reconstruction error against its bound.
#include "ft/trainer/nf4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ft/core/error.h"
#include "ft/trainer/precision.h"

namespace {
using namespace ft::trainer;

// The standard normal's quantile by bisection on erfc (to ~1e-15).
double normal_quantile(double p) {
  double lo = -10, hi = 10;
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

// The table as QLoRA's code publishes it (float32 values printed in full).
TEST(Nf4, CodesAreThePublishedTableAndTheNormalQuantiles) {
  const double published[16] = {-1.0,
                                -0.6961928009986877,
                                -0.5250730514526367,
                                -0.39491748809814453,
                                -0.28444138169288635,
                                -0.18477343022823334,
                                -0.09105003625154495,
                                0.0,
                                0.07958029955625534,
                                0.16093020141124725,
                                0.24611230194568634,
                                0.33791524171829224,
                                0.44070982933044434,
                                0.5626170039176941,
                                0.7229568362236023,
                                1.0};
  // The construction: with offset 0.9677083 (QLoRA's, halfway between 1 - 1/30 and 1 - 1/32),
  // 8 positive quantiles at equal steps from the offset to 0.5, 7 negative ones, and 0,
  // divided by the largest.
  const double offset = 0.9677083;
  std::vector<double> v = {0.0};
  for (int i = 0; i < 8; ++i) v.push_back(normal_quantile(offset + (0.5 - offset) * i / 8));
  for (int i = 0; i < 7; ++i) v.push_back(-normal_quantile(offset + (0.5 - offset) * i / 7));
  std::sort(v.begin(), v.end());
  for (double& x : v) x /= v.back();
  for (int i = 0; i < 16; ++i) {
    EXPECT_NEAR(nf4_codes()[i], published[i], 1e-7) << i;
    EXPECT_NEAR(v[static_cast<size_t>(i)], published[i], 1e-6) << i;  // float32 rounding
  }
}

TEST(Nf4, NearestCodeIsTheNearest) {
  for (int k = -1000; k <= 1000; ++k) {
    const float x = static_cast<float>(k) / 1000.0f;
    const uint8_t c = nf4_nearest(x);
    for (int j = 0; j < 16; ++j)
      EXPECT_LE(std::fabs(x - nf4_codes()[c]), std::fabs(x - nf4_codes()[j]) + 1e-7f) << x;
  }
  EXPECT_EQ(nf4_nearest(-5.0f), 0);
  EXPECT_EQ(nf4_nearest(5.0f), 15);
  EXPECT_EQ(nf4_nearest(0.0f), 7);
}

TEST(Nf4, E4m3RoundTripsEveryByteAndRoundsToNearest) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) {  // NaN
      EXPECT_TRUE(std::isnan(e4m3_to_float(static_cast<uint8_t>(b))));
      continue;
    }
    const float f = e4m3_to_float(static_cast<uint8_t>(b));
    EXPECT_EQ(float_to_e4m3(f), b == 0x80 ? 0x80 : b) << b << " " << f;
  }
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(float_to_e4m3(1e6f), 0x7e);  // saturates
  EXPECT_EQ(float_to_e4m3(-1e6f), 0xfe);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-448.0f, 448.0f);
  for (int i = 0; i < 100000; ++i) {
    const float x = u(rng);
    const float r = e4m3_to_float(float_to_e4m3(x));
    // 3 mantissa bits: half an ulp is 1/16 of the value's binade; subnormals 2^-10.
    EXPECT_LE(std::fabs(r - x), std::max(std::fabs(x) / 16.0f, std::ldexp(1.0f, -10))) << x;
  }
}

// Gaussian weights with a few outliers, in blocks that share no absmax: every weight within the
// bound its code and its block's stored absmax allow, and NF4 closer than uniform 4-bit codes.
TEST(Nf4, ReconstructionErrorWithinItsBound) {
  const size_t n = kNf4Block * kNf4AbsmaxBlock * 3 + 37;  // three absmax groups and a tail
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::vector<float> w(n);
  for (float& x : w) x = g(rng);
  for (size_t i = 0; i < n; i += 997) w[i] *= 12;  // outliers
  const Nf4Tensor q = quantize_nf4(w.data(), n);
  ASSERT_EQ(q.blocks(), (n + kNf4Block - 1) / kNf4Block);
  std::vector<float> back(n);
  dequantize_nf4(q, 0, n, back.data());
  // The largest half-gap between neighbouring codes (between -1 and -0.696).
  double half_gap = 0;
  for (int c = 0; c < 15; ++c)
    half_gap = std::max(half_gap, (nf4_codes()[c + 1] - nf4_codes()[c]) / 2.0);
  double nf4_se = 0, int4_se = 0;
  for (size_t b = 0; b < q.blocks(); ++b) {
    const size_t lo = b * kNf4Block, hi = std::min(n, lo + kNf4Block);
    float a = 0;
    for (size_t i = lo; i < hi; ++i) a = std::max(a, std::fabs(w[i]));
    const float stored = q.absmax(b);
    // The absmax's own error: E4M3's on its centred value (1/16), or half its smallest step.
    const float c2 = q.absmax_c2[b / kNf4AbsmaxBlock];
    const float a_err = std::fabs(stored - a);
    EXPECT_LE(a_err, std::max(std::fabs(a - q.absmax_mean) / 16.0f,
                              c2 * std::ldexp(1.0f, -10) / kE4m3Max) +
                         1e-6f * a)
        << b;
    for (size_t i = lo; i < hi; ++i) {
      const double bound = half_gap * stored + std::max(0.0f, a - stored) + 1e-6 * a;
      EXPECT_LE(std::fabs(back[i] - w[i]), bound) << i;
      nf4_se += (back[i] - w[i]) * (back[i] - w[i]);
      const double u = a > 0 ? std::nearbyint(w[i] / a * 7) * a / 7 : 0;  // uniform int4
      int4_se += (u - w[i]) * (u - w[i]);
    }
  }
  EXPECT_LT(nf4_se, 0.8 * int4_se);  // normal weights: NF4's levels fit them better
  // Storage: 4 bits per weight, one byte per 64, 4 bytes per 64 x 256, the mean: ~4.127 bits.
  EXPECT_EQ(q.bytes(), (n + 1) / 2 + q.blocks() + 4 * q.absmax_c2.size() + 4);
  EXPECT_LT(8.0 * static_cast<double>(q.bytes()) / static_cast<double>(n), 4.13);
}

TEST(Nf4, RangesBf16ZerosAndBadInput) {
  const size_t n = 1000;  // not a multiple of the block
  std::vector<float> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = std::sin(static_cast<float>(i)) * (i < 128 ? 0.0f : 1.0f);
  const Nf4Tensor q = quantize_nf4(w.data(), n);
  std::vector<float> all(n), part(500);
  dequantize_nf4(q, 0, n, all.data());
  for (size_t i = 0; i < 128; ++i) EXPECT_EQ(all[i], 0.0f) << i;  // all-zero blocks stay zero
  dequantize_nf4(q, 37, 500, part.data());
  std::vector<uint16_t> bf(500);
  dequantize_nf4_bf16(q, 37, 500, bf.data());
  for (size_t k = 0; k < 500; ++k) {
    EXPECT_EQ(part[k], all[37 + k]) << k;
    EXPECT_EQ(bf[k], fp32_to_bf16_scalar(all[37 + k])) << k;
  }
  EXPECT_THROW(dequantize_nf4(q, 990, 11, part.data()), ft::Error);
  w[321] = std::nanf("");
  try {
    quantize_nf4(w.data(), n);
    FAIL() << "a NaN weight was quantized";
  } catch (const ft::Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight 321"), std::string::npos) << e.what();
  }
}

}  // namespace
