// lora_linear_test.cpp: QLoRA's linear layer against an fp64 reference on the dequantized weight,
// whose gradients are themselves checked by central differences; the NF4 weight gets none.
#include "ft/trainer/lora_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ft/core/allocator.h"
#include "ft/core/error.h"
#include "ft/trainer/matmul.h"
#include "ft/trainer/precision.h"

namespace {
using namespace ft::trainer;

struct Case {
  LoraShape s;
  std::vector<float> x, w, bias, A, B, g;  // g: dL/dout, L = sum(out * g)
  std::vector<uint8_t> keep;
  Nf4Tensor q;
  std::vector<double> wq;  // the dequantized weight, fp64
};

Case make(int N, int IC, int OC, int r, float p, uint32_t seed) {
  Case c;
  c.s = {N, IC, OC, r, 16.0f / static_cast<float>(r), p};
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const auto fill = [&](std::vector<float>& v, size_t n, float sd) {
    v.resize(n);
    for (float& f : v) f = sd * nd(rng);
  };
  fill(c.x, static_cast<size_t>(N) * IC, 1.0f);
  fill(c.w, static_cast<size_t>(OC) * IC, 0.05f);
  fill(c.bias, static_cast<size_t>(OC), 0.1f);
  fill(c.A, static_cast<size_t>(r) * IC, 0.05f);
  fill(c.B, static_cast<size_t>(OC) * r, 0.05f);  // QLoRA starts B at 0; nonzero tests dA
  fill(c.g, static_cast<size_t>(N) * OC, 1.0f);
  if (p > 0) {
    std::bernoulli_distribution keep(1.0 - p);
    c.keep.resize(c.x.size());
    for (uint8_t& k : c.keep) k = keep(rng) ? 1 : 0;
  }
  c.q = quantize_nf4(c.w.data(), c.w.size());
  std::vector<float> wf(c.w.size());
  dequantize_nf4(c.q, 0, wf.size(), wf.data());
  c.wq.assign(wf.begin(), wf.end());
  return c;
}

// L = sum(out * g) in fp64, out = x Wq^T + b + scale * (drop(x) A^T) B^T.
double loss(const Case& c, const std::vector<double>& x, const std::vector<double>& A,
            const std::vector<double>& B) {
  const LoraShape& s = c.s;
  double L = 0;
  for (int n = 0; n < s.N; ++n) {
    std::vector<double> xd(static_cast<size_t>(s.IC));
    for (int i = 0; i < s.IC; ++i) {
      const size_t k = static_cast<size_t>(n) * s.IC + i;
      xd[i] = c.keep.empty() ? x[k] : c.keep[k] ? x[k] / (1.0 - s.dropout) : 0.0;
    }
    std::vector<double> h(static_cast<size_t>(s.rank), 0.0);
    for (int j = 0; j < s.rank; ++j)
      for (int i = 0; i < s.IC; ++i) h[j] += xd[i] * A[static_cast<size_t>(j) * s.IC + i];
    for (int o = 0; o < s.OC; ++o) {
      double y = c.bias[o];
      for (int i = 0; i < s.IC; ++i)
        y += x[static_cast<size_t>(n) * s.IC + i] * c.wq[static_cast<size_t>(o) * s.IC + i];
      for (int j = 0; j < s.rank; ++j) y += s.scale * h[j] * B[static_cast<size_t>(o) * s.rank + j];
      L += y * c.g[static_cast<size_t>(n) * s.OC + o];
    }
  }
  return L;
}

std::vector<double> wide(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// d loss / d v[i] by central differences (L is bilinear in each argument: exact up to rounding).
double central(const Case& c, std::vector<double> x, std::vector<double> A, std::vector<double> B,
               int which, size_t i) {
  std::vector<double>& v = which == 0 ? x : which == 1 ? A : B;
  const double h = 1e-3, v0 = v[i];
  v[i] = v0 + h;
  const double up = loss(c, x, A, B);
  v[i] = v0 - h;
  const double down = loss(c, x, A, B);
  return (up - down) / (2 * h);
}

void check_case(const Case& c) {
  const LoraShape& s = c.s;
  const uint8_t* keep = c.keep.empty() ? nullptr : c.keep.data();
  std::vector<float> ws(lora_workspace_floats(s, keep != nullptr));
  std::vector<float> out(static_cast<size_t>(s.N) * s.OC), h(static_cast<size_t>(s.N) * s.rank);
  lora_linear_forward(out.data(), h.data(), c.x.data(), c.q, c.bias.data(), c.A.data(), c.B.data(),
                      keep, s, ws.data());
  // Forward: L from the op's output against the fp64 reference (fp32 sums over IC terms).
  double L = 0;
  for (size_t i = 0; i < out.size(); ++i) L += static_cast<double>(out[i]) * c.g[i];
  const double ref = loss(c, wide(c.x), wide(c.A), wide(c.B));
  EXPECT_NEAR(L, ref, 1e-4 * (1 + std::fabs(ref)));
  std::vector<float> dx(c.x.size()), dA(c.A.size(), 0.0f), dB(c.B.size(), 0.0f);
  lora_linear_backward(dx.data(), dA.data(), dB.data(), c.g.data(), c.x.data(), h.data(), c.q,
                       c.A.data(), c.B.data(), keep, s, ws.data());
  // Gradients: every element of dA and dB, a sample of dx, against central differences of the
  // fp64 loss; tolerance 1e-3 relative (fp32 GEMM sums of up to ~100 terms).
  const auto x = wide(c.x), A = wide(c.A), B = wide(c.B);
  for (size_t i = 0; i < dA.size(); ++i) {
    const double fd = central(c, x, A, B, 1, i);
    EXPECT_NEAR(dA[i], fd, 1e-3 * (1 + std::fabs(fd))) << "dA " << i;
  }
  for (size_t i = 0; i < dB.size(); ++i) {
    const double fd = central(c, x, A, B, 2, i);
    EXPECT_NEAR(dB[i], fd, 1e-3 * (1 + std::fabs(fd))) << "dB " << i;
  }
  for (size_t i = 0; i < dx.size(); i += 7) {
    const double fd = central(c, x, A, B, 0, i);
    EXPECT_NEAR(dx[i], fd, 1e-3 * (1 + std::fabs(fd))) << "dx " << i;
  }
}

// Shapes off the tile (OC = 67 > 64 rows: two tiles) and off NF4's 64-weight blocks.
TEST(LoraLinear, MatchesTheFp64ReferenceAndItsFiniteDifferences) {
  check_case(make(5, 70, 67, 4, 0.0f, 1));
}

TEST(LoraLinear, DropoutMasksOnlyTheAdaptersInput) { check_case(make(3, 33, 130, 2, 0.25f, 2)); }

// A zero B (QLoRA's start) adds nothing: the output is the frozen layer's.
TEST(LoraLinear, ZeroBIsTheFrozenLayer) {
  Case c = make(4, 40, 20, 8, 0.0f, 3);
  std::fill(c.B.begin(), c.B.end(), 0.0f);
  std::vector<float> ws(lora_workspace_floats(c.s, false));
  std::vector<float> out(static_cast<size_t>(c.s.N) * c.s.OC), h(static_cast<size_t>(c.s.N) * 8);
  lora_linear_forward(out.data(), h.data(), c.x.data(), c.q, nullptr, c.A.data(), c.B.data(),
                      nullptr, c.s, ws.data());
  for (int n = 0; n < c.s.N; ++n)
    for (int o = 0; o < c.s.OC; ++o) {
      double y = 0;
      for (int i = 0; i < c.s.IC; ++i)
        y += c.x[static_cast<size_t>(n) * c.s.IC + i] * c.wq[static_cast<size_t>(o) * c.s.IC + i];
      EXPECT_NEAR(out[static_cast<size_t>(n) * c.s.OC + o], y, 1e-5 * (1 + std::fabs(y)));
    }
}

TEST(LoraLinear, AWeightOfTheWrongSizeIsRefused) {
  Case c = make(2, 16, 8, 2, 0.0f, 4);
  LoraShape s = c.s;
  s.IC = 17;
  std::vector<float> ws(lora_workspace_floats(s, false)), out(2 * 8), h(2 * 2);
  EXPECT_THROW(lora_linear_forward(out.data(), h.data(), c.x.data(), c.q, nullptr, c.A.data(),
                                   c.B.data(), nullptr, s, ws.data()),
               ft::Error);
}

// bf16 operands: the frozen weight's GEMMs take x (or dout) and W's tiles rounded to bf16 with
// fp32 accumulation. Against the fp32 path, the output and dx move by exactly what rounding the
// operands moves the fp64 products (tolerance 1e-4 of the values: fp32 accumulation); the
// adapter's gradients stay fp32 and do not move.
TEST(LoraLinear, Bf16OperandsDifferFromFp32OnlyByTheirRounding) {
  Case c = make(9, 70, 130, 4, 0.25f, 4);
  ft::CachingAllocator alloc;
  Gemm gemm(alloc);
  const int N = c.s.N, IC = c.s.IC, OC = c.s.OC, r = c.s.rank;
  struct Out {
    std::vector<float> out, dx, dA, dB;
  };
  auto run = [&](bool bf16) {
    LoraShape s = c.s;
    s.bf16 = bf16;
    std::vector<float> ws(lora_workspace_floats(s, true));
    Out o{std::vector<float>(static_cast<size_t>(N) * OC), std::vector<float>(c.x.size()),
          std::vector<float>(c.A.size(), 0.0f), std::vector<float>(c.B.size(), 0.0f)};
    std::vector<float> h(static_cast<size_t>(N) * r);
    lora_linear_forward(o.out.data(), h.data(), c.x.data(), c.q, c.bias.data(), c.A.data(),
                        c.B.data(), c.keep.data(), s, ws.data(), &gemm);
    lora_linear_backward(o.dx.data(), o.dA.data(), o.dB.data(), c.g.data(), c.x.data(), h.data(),
                         c.q, c.A.data(), c.B.data(), c.keep.data(), s, ws.data(), &gemm);
    return o;
  };
  const Out f = run(false), b = run(true);
  auto bf = [](double v) {
    return static_cast<double>(bf16_to_fp32_scalar(fp32_to_bf16_scalar(static_cast<float>(v))));
  };
  double moved = 0;
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      double d = 0;  // what bf16 operands change in x Wq^T
      for (int i = 0; i < IC; ++i) {
        const double x = c.x[static_cast<size_t>(n) * IC + i],
                     w = c.wq[static_cast<size_t>(o) * IC + i];
        d += bf(x) * bf(w) - x * w;
      }
      const size_t k = static_cast<size_t>(n) * OC + o;
      EXPECT_NEAR(b.out[k] - f.out[k], d, 1e-4 * (1 + std::fabs(f.out[k]))) << n << "," << o;
      moved = std::max(moved, std::fabs(d));
    }
    for (int i = 0; i < IC; ++i) {
      double d = 0;  // dx's base part: dout W
      for (int o = 0; o < OC; ++o) {
        const double g = c.g[static_cast<size_t>(n) * OC + o],
                     w = c.wq[static_cast<size_t>(o) * IC + i];
        d += bf(g) * bf(w) - g * w;
      }
      const size_t k = static_cast<size_t>(n) * IC + i;
      EXPECT_NEAR(b.dx[k] - f.dx[k], d, 1e-4 * (1 + std::fabs(f.dx[k]))) << n << "," << i;
    }
  }
  EXPECT_GT(moved, 1e-4);  // the bf16 path did round
  EXPECT_EQ(b.dA, f.dA);
  EXPECT_EQ(b.dB, f.dB);
}

}  // namespace
