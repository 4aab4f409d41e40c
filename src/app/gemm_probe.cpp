// gemm_probe.cpp: the run's MLP GEMMs timed in fp32 and bf16 through the engine's Gemm.
#include "ft/app/gemm_probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <vector>

#include "ft/core/allocator.h"
#include "ft/core/rng.h"
#include "ft/trainer/matmul.h"
#include "ft/trainer/precision.h"

namespace ft::app {
namespace {

constexpr int kMaxRows = 2048;     // bounds a pass on large batches (rows scale linearly)
constexpr double kBudgetMs = 500;  // repetitions after the warm-up pass, within this time

struct Layer {
  int in = 0, out = 0;
  std::vector<float> w, x, y, dy, dx, dw;
  std::vector<uint16_t> w_bf16;
  Layer(int rows, int ic, int oc)
      : in(ic),
        out(oc),
        w(static_cast<size_t>(oc) * ic),
        x(static_cast<size_t>(rows) * ic),
        y(static_cast<size_t>(rows) * oc),
        dy(y.size()),
        dx(x.size()),
        dw(w.size()),
        w_bf16(w.size()) {
    Rng rng(12345);  // fixed pseudo-random operands in [-0.5, 0.5)
    const auto fill = [&](std::vector<float>& v) {
      for (float& f : v) f = static_cast<float>(rng.uniform() - 0.5);
    };
    fill(w);
    fill(x);
    fill(dy);
    trainer::fp32_to_bf16(w_bf16.data(), w.data(), w.size());
  }
};

double pass_ms(trainer::Gemm& g, std::vector<Layer>& layers, int rows, trainer::Precision p) {
  const auto t0 = std::chrono::steady_clock::now();
  for (Layer& l : layers) {
    const void* lp = p == trainer::Precision::kFp32 ? nullptr : l.w_bf16.data();
    g.forward(l.y.data(), l.x.data(), l.w.data(), lp, nullptr, rows, l.in, l.out, p);
    g.backward(l.dx.data(), l.dw.data(), nullptr, l.dy.data(), l.x.data(), l.w.data(), lp, rows,
               l.in, l.out, false, p);
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

GemmSpeedup measure_gemm_bf16_speedup(const trainer::TrainConfig& c, int reps) {
  GemmSpeedup r;
  if (c.device != trainer::DeviceKind::kCpu) {
    r.why_not = "not a CPU run";
    return r;
  }
  if (trainer::Gemm::library_info().find("bf16 emulated") != std::string::npos) {
    r.why_not = "bf16 is emulated on this CPU";
    return r;
  }
  const int rows = std::clamp(c.micro_batch * c.seq_len, 1, kMaxRows);
  const int ch = c.model.channels, tp = std::max(1, c.parallel.tp);
  const int hidden = std::max(1, 4 * ch / tp);
  if (ch < 1) {
    r.why_not = "no model width";
    return r;
  }
  r.shapes = fmt::format("({},{})x({},{})^T and ({},{})x({},{})^T", rows, ch, hidden, ch, rows,
                         hidden, ch, hidden);
  try {
    CachingAllocator alloc;
    trainer::Gemm g(alloc);
    std::vector<Layer> layers;
    layers.emplace_back(rows, ch, hidden);
    layers.emplace_back(rows, hidden, ch);
    // Warm-up (primitives, scratch, caches); its times size the repetitions: at most `reps`,
    // at least one, within kBudgetMs (a C = 768 model's pass takes a few hundred ms).
    const double warm = pass_ms(g, layers, rows, trainer::Precision::kFp32) +
                        pass_ms(g, layers, rows, trainer::Precision::kBf16);
    const int n =
        std::clamp(static_cast<int>(kBudgetMs / std::max(warm, 1e-3)), 1, std::max(1, reps));
    double f32 = 1e300, b16 = 1e300;
    for (int i = 0; i < n; ++i) {  // alternating, so drift hits both alike
      f32 = std::min(f32, pass_ms(g, layers, rows, trainer::Precision::kFp32));
      b16 = std::min(b16, pass_ms(g, layers, rows, trainer::Precision::kBf16));
    }
    r.fp32_ms = f32;
    r.bf16_ms = b16;
    if (f32 > 0 && b16 > 0) r.ratio = f32 / b16;
  } catch (const std::exception& e) {
    r.why_not = e.what();
    r.ratio = 0;
  }
  return r;
}

}  // namespace ft::app
