// sgemm_bench: GFLOP/s of ft's packed AVX-512 sgemm vs oneDNN fp32 matmul on the linear-layer GEMMs.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "../trainer/ops/sgemm.h"

namespace {

// C (m,n) = op(A) (m,k) @ op(B) (k,n), row-major. trans_a: A stored (k,m); trans_b: B stored (n,k).
struct Shape {
  std::string name;
  int m, n, k;
  bool trans_a, trans_b;
  int count;  // occurrences per training step
  double flops() const { return 2.0 * m * n * k; }
};

// ft's three GEMMs of a linear layer with weight W (out, in) over `rows` tokens.
void add_linear(std::vector<Shape>& v, const std::string& name, int rows, int in, int out,
                int count) {
  v.push_back({name + ".fwd", rows, out, in, false, true, count});   // inp @ W^T   (NT)
  v.push_back({name + ".dinp", rows, in, out, false, false, count});  // dout @ W   (NN)
  v.push_back({name + ".dW", out, in, rows, true, false, count});     // dout^T @ inp (TN)
}

std::vector<Shape> config_shapes(int rows, int c, int vocab, int layers) {
  std::vector<Shape> v;
  add_linear(v, "qkv", rows, c, 3 * c, layers);
  add_linear(v, "attn_proj", rows, c, c, layers);
  add_linear(v, "fc", rows, c, 4 * c, layers);
  add_linear(v, "fc_proj", rows, 4 * c, c, layers);
  add_linear(v, "lm_head", rows, c, vocab, 1);
  return v;
}

// With cpu_time (a tuning aid on a shared machine), process CPU time divided by the thread
// count replaces wall time, so time slices lost to other processes do not count.
bool cpu_time = false;
int bench_threads = 2;
double now_ms() {
  if (cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6) / bench_threads;
  }
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Median (or, with use_min, minimum) of `reps` timed runs after `warmup` untimed ones, in ms.
bool use_min = false;
template <typename Fn>
double median_ms(Fn fn, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now_ms();
    fn();
    ms.push_back(now_ms() - t0);
  }
  std::sort(ms.begin(), ms.end());
  return use_min ? ms.front() : ms[ms.size() / 2];
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 5, warmup = 2;
  std::string only;  // "A", "B" or empty for both
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (arg == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (arg == "--min") use_min = true;
    else if (arg == "--cpu-time") cpu_time = true;
    else if (arg == "--config" && i + 1 < argc) only = argv[++i];
    else if (arg == "--shape" && i + 1 < argc) only = std::string("shape:") + argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--threads N] [--reps N] [--config A|B] [--shape NAME] [--min] [--cpu-time]\n",
                   argv[0]);
      return 2;
    }
  }
  omp_set_num_threads(threads);
  bench_threads = threads;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  using dt = dnnl::memory::data_type;

  struct Config {
    std::string name;
    int rows, c, vocab, layers;
  };
  const std::vector<Config> configs = {{"B", 2048, 256, 50304, 4}, {"A", 256, 768, 50304, 12}};
  std::printf("sgemm_bench: %d threads, %s of %d after %d warm-up; loadavg at start %s\n",
              threads, use_min ? "min" : "median", reps, warmup, loadavg().c_str());
  if (cpu_time) std::printf("timing: process CPU time / threads (not wall time)\n");
  std::printf("%-3s %-15s %6s %6s %6s %4s  %9s %9s  %8s %8s\n", "cfg", "shape", "M", "N", "K",
              "op", "ft ms", "dnnl ms", "ft GF/s", "dnnl GF/s");
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const Config& cfg : configs) {
    if (!only.empty() && only.rfind("shape:", 0) != 0 && only != cfg.name) continue;
    double flops = 0, ft_ms = 0, dnnl_ms = 0;
    for (const Shape& s : config_shapes(cfg.rows, cfg.c, cfg.vocab, cfg.layers)) {
      if (only.rfind("shape:", 0) == 0 && only.substr(6) != s.name) continue;
      std::vector<float> a(static_cast<size_t>(s.m) * s.k), b(static_cast<size_t>(s.k) * s.n);
      std::vector<float> c(static_cast<size_t>(s.m) * s.n);
      for (float& x : a) x = dist(rng);
      for (float& x : b) x = dist(rng);
      const int lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
      const double t_ft = median_ms(
          [&] {
            ft::trainer::ops::sgemm(s.trans_a, s.trans_b, s.m, s.n, s.k, a.data(), lda, b.data(),
                                    ldb, 0.0f, c.data(), s.n);
          },
          warmup, reps);

      const dnnl::memory::desc a_md(
          {s.m, s.k}, dt::f32,
          s.trans_a ? dnnl::memory::dims{1, s.m} : dnnl::memory::dims{s.k, 1});
      const dnnl::memory::desc b_md(
          {s.k, s.n}, dt::f32,
          s.trans_b ? dnnl::memory::dims{1, s.k} : dnnl::memory::dims{s.n, 1});
      const dnnl::memory::desc c_md({s.m, s.n}, dt::f32, dnnl::memory::dims{s.n, 1});
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
      const dnnl::matmul prim(pd);
      const std::unordered_map<int, dnnl::memory> args = {
          {DNNL_ARG_SRC, dnnl::memory(a_md, eng, a.data())},
          {DNNL_ARG_WEIGHTS, dnnl::memory(b_md, eng, b.data())},
          {DNNL_ARG_DST, dnnl::memory(c_md, eng, c.data())}};
      const double t_dnnl = median_ms(
          [&] {
            prim.execute(strm, args);
            strm.wait();
          },
          warmup, reps);

      const char* op = s.trans_a ? "TN" : (s.trans_b ? "NT" : "NN");
      std::printf("%-3s %-15s %6d %6d %6d %4s  %9.3f %9.3f  %8.1f %8.1f\n", cfg.name.c_str(),
                  s.name.c_str(), s.m, s.n, s.k, op, t_ft, t_dnnl, s.flops() / t_ft * 1e-6,
                  s.flops() / t_dnnl * 1e-6);
      std::fflush(stdout);
      flops += s.flops() * s.count;
      ft_ms += t_ft * s.count;
      dnnl_ms += t_dnnl * s.count;
    }
    if (flops > 0) {
      std::printf("%-3s %-15s flop-weighted (one step's GEMMs %.2f GFLOP): ft %.1f GF/s (%.1f ms),"
                  " onednn %.1f GF/s (%.1f ms)\n",
                  cfg.name.c_str(), "TOTAL", flops * 1e-9, flops / ft_ms * 1e-6, ft_ms,
                  flops / dnnl_ms * 1e-6, dnnl_ms);
    }
  }
  std::printf("loadavg at end %s\n", loadavg().c_str());
  return 0;
}
