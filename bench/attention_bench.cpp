// attention_bench.cpp: times forward and backward of the materialised and flash causal attention.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "ft/trainer/ops.h"

namespace ops = ft::trainer::ops;

namespace {

struct Shape {
  const char* name;
  int B, T, C, NH;
};

struct Timing {
  double median, min;  // ms
};

template <typename F>
Timing time_ms(F&& f, int warmup = 3, int reps = 10) {
  for (int i = 0; i < warmup; i++) f();
  std::vector<double> ms;
  for (int i = 0; i < reps; i++) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {0.5 * (ms[reps / 2 - 1] + ms[reps / 2]), ms[0]};
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string s;
  std::getline(f, s);
  return s;
}

void run(const Shape& s) {
  const int B = s.B, T = s.T, C = s.C, NH = s.NH, HS = C / NH;
  const size_t nqkv = static_cast<size_t>(B) * T * 3 * C;
  const size_t nout = static_cast<size_t>(B) * T * C;
  const size_t natt = static_cast<size_t>(B) * NH * T * T;
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> qkv(nqkv), dout(nout);  // (B,T,3C), (B,T,C)
  for (auto& x : qkv) x = nd(rng);
  for (auto& x : dout) x = nd(rng);
  std::vector<float> out(nout), att(natt), datt(natt), dqkv(nqkv);  // att (B,NH,T,T)
  std::vector<float> lse(static_cast<size_t>(B) * NH * T);          // (B,NH,T)
  // causal useful flops: fwd = QK^T + PV over T(T+1)/2 pairs; bwd = 2.5x that (S, dP, dV, dK, dQ).
  const double pairs = static_cast<double>(B) * NH * T * (T + 1) / 2.0;
  const double fwd_gf = 2.0 * pairs * HS * 2.0 * 1e-9;
  const double bwd_gf = 2.0 * pairs * HS * 4.0 * 1e-9;   // materialised: dP, dV, dK, dQ
  const double fbwd_gf = 2.0 * pairs * HS * 5.0 * 1e-9;  // flash also recomputes S
  const Timing mf =
      time_ms([&] { ops::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH); });
  const Timing mb = time_ms([&] {
    ops::attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C,
                            NH);
  });
  const Timing ff = time_ms(
      [&] { ops::attention_flash_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH); });
  const Timing fb = time_ms([&] {
    ops::attention_flash_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B,
                                  T, C, NH);
  });
  std::printf("%-22s B=%d T=%d C=%d NH=%d HS=%d\n", s.name, B, T, C, NH, HS);
  auto line = [&](const char* name, Timing f, Timing b, double bgf) {
    std::printf(
        "  %-12s fwd %7.3f ms %6.1f GF/s (min %7.3f) | bwd %7.3f ms %6.1f GF/s (min %7.3f) |"
        " f+b %7.3f ms (min %7.3f)\n",
        name, f.median, fwd_gf / f.median * 1e3, f.min, b.median, bgf / b.median * 1e3, b.min,
        f.median + b.median, f.min + b.min);
  };
  line("materialised", mf, mb, bwd_gf);
  line("flash", ff, fb, fbwd_gf);
}

}  // namespace

// usage: attention_bench [threads=2] [shape=all]
int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  omp_set_num_threads(threads);
  std::printf("threads %d, loadavg before: %s\n", threads, loadavg().c_str());
  const int only = argc > 2 ? std::atoi(argv[2]) : -1;  // optional: run one shape (0 or 1)
  if (only != 1) run({"B8 T256 C256 NH4", 8, 256, 256, 4});
  if (only != 0) run({"GPT-2 124M B4 T64", 4, 64, 768, 12});
  std::printf("loadavg after: %s\n", loadavg().c_str());
  return 0;
}
