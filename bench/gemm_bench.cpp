// gemm_bench: GFLOP/s of oneDNN matmul (fp32, bf16) and OpenBLAS sgemm on one GPT-2 training step's GEMMs.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#if FT_BENCH_OPENBLAS
#include <cblas.h>
extern "C" {
// OpenBLAS extensions (not in the netlib cblas.h that may be the one found).
void openblas_set_num_threads(int num_threads);
char* openblas_get_corename(void);
char* openblas_get_config(void);
}
#endif

namespace {

// C(m, n) = op(A)(m, k) * op(B)(k, n), all row-major. trans_a: A is stored (k, m); trans_b: B is
// stored (n, k). `count` is how many times the GEMM occurs in one training step.
struct Shape {
  std::string name;
  int64_t m, n, k;
  bool trans_a, trans_b;
  int count;
  double Flops() const { return 2.0 * static_cast<double>(m) * n * k; }
};

struct Options {
  int threads = 2;
  int reps = 7;
  int warmup = 2;
  int64_t layers = 4, channels = 256, vocab = 50257, tokens = 2048;  // config (B): B=8, T=256.
  bool dnnl_fp32 = true, dnnl_bf16 = true, openblas = true;
  bool weights_in_out = false;  // store W as (in, out) instead of PyTorch's (out, in).
};

struct Row {
  std::string shape, lib, precision, impl;
  int64_t m, n, k;
  int count;
  double median_ms, min_ms, gflops;
};

// Shapes for a linear layer with `in` inputs and `out` outputs over `tokens` rows. With the
// weight stored (out, in) row-major like PyTorch: forward Y = X W^T, dX = dY W, dW = dY^T X.
// With it stored (in, out): forward Y = X W, dX = dY W^T, dW = X^T dY.
void AddLinear(std::vector<Shape>& v, const std::string& name, int64_t tokens, int64_t in,
               int64_t out, int count, bool weights_in_out) {
  if (weights_in_out) {
    v.push_back({name + ".fwd", tokens, out, in, false, false, count});
    v.push_back({name + ".dX", tokens, in, out, false, true, count});
    v.push_back({name + ".dW", in, out, tokens, true, false, count});
  } else {
    v.push_back({name + ".fwd", tokens, out, in, false, true, count});
    v.push_back({name + ".dX", tokens, in, out, false, false, count});
    v.push_back({name + ".dW", out, in, tokens, true, false, count});
  }
}

std::vector<Shape> StepShapes(const Options& o) {
  std::vector<Shape> v;
  const int64_t c = o.channels;
  const int l = static_cast<int>(o.layers);
  AddLinear(v, "qkv", o.tokens, c, 3 * c, l, o.weights_in_out);
  AddLinear(v, "attn_proj", o.tokens, c, c, l, o.weights_in_out);
  AddLinear(v, "fc", o.tokens, c, 4 * c, l, o.weights_in_out);
  AddLinear(v, "fc_proj", o.tokens, 4 * c, c, l, o.weights_in_out);
  AddLinear(v, "lm_head", o.tokens, c, o.vocab, 1, o.weights_in_out);
  return v;
}

uint16_t ToBf16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Runs `fn` warmup + reps times; returns {median, min} in ms.
template <typename Fn>
std::pair<double, double> Time(Fn fn, const Options& o) {
  for (int i = 0; i < o.warmup; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < o.reps; ++i) {
    const double t0 = NowMs();
    fn();
    ms.push_back(NowMs() - t0);
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

const char* IsaName(dnnl::cpu_isa isa) {
  using dnnl::cpu_isa;
  switch (isa) {
    case cpu_isa::sse41: return "sse41";
    case cpu_isa::avx: return "avx";
    case cpu_isa::avx2: return "avx2";
    case cpu_isa::avx2_vnni: return "avx2_vnni";
    case cpu_isa::avx512_mic: return "avx512_mic";
    case cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case cpu_isa::avx512_core: return "avx512_core";
    case cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case cpu_isa::all: return "all";
    default: return "unknown";
  }
}

dnnl::memory::dims Strides(int64_t rows, int64_t cols, bool stored_transposed) {
  // Logical (rows, cols); stored_transposed means the buffer is (cols, rows) row-major.
  return stored_transposed ? dnnl::memory::dims{1, rows} : dnnl::memory::dims{cols, 1};
}

Row BenchDnnl(const Shape& s, bool bf16, const std::vector<float>& a, const std::vector<float>& b,
              std::vector<float>& c, const Options& o, dnnl::engine& eng, dnnl::stream& strm) {
  using dt = dnnl::memory::data_type;
  const dt in_dt = bf16 ? dt::bf16 : dt::f32;
  const dnnl::memory::desc a_md({s.m, s.k}, in_dt, Strides(s.m, s.k, s.trans_a));
  const dnnl::memory::desc b_md({s.k, s.n}, in_dt, Strides(s.k, s.n, s.trans_b));
  const dnnl::memory::desc c_md({s.m, s.n}, dt::f32, dnnl::memory::dims{s.n, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
  const dnnl::matmul prim(pd);

  std::vector<uint16_t> a16, b16;
  dnnl::memory a_mem, b_mem;
  if (bf16) {
    a16.resize(a.size());
    b16.resize(b.size());
    std::transform(a.begin(), a.end(), a16.begin(), ToBf16);
    std::transform(b.begin(), b.end(), b16.begin(), ToBf16);
    a_mem = dnnl::memory(a_md, eng, a16.data());
    b_mem = dnnl::memory(b_md, eng, b16.data());
  } else {
    a_mem = dnnl::memory(a_md, eng, const_cast<float*>(a.data()));
    b_mem = dnnl::memory(b_md, eng, const_cast<float*>(b.data()));
  }
  dnnl::memory c_mem(c_md, eng, c.data());
  const std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}};
  const auto [med, mn] = Time(
      [&] {
        prim.execute(strm, args);
        strm.wait();
      },
      o);
  return {s.name, "onednn", bf16 ? "bf16" : "fp32", pd.impl_info_str(), s.m, s.n, s.k, s.count,
          med, mn, s.Flops() / med * 1e-6};
}

#if FT_BENCH_OPENBLAS
Row BenchOpenBlas(const Shape& s, const std::vector<float>& a, const std::vector<float>& b,
                  std::vector<float>& c, const Options& o) {
  const int m = static_cast<int>(s.m), n = static_cast<int>(s.n), k = static_cast<int>(s.k);
  const int lda = s.trans_a ? m : k;
  const int ldb = s.trans_b ? k : n;
  const auto [med, mn] = Time(
      [&] {
        cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
                    s.trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a.data(), lda, b.data(),
                    ldb, 0.0f, c.data(), n);
      },
      o);
  return {s.name, "openblas", "fp32", openblas_get_corename(), s.m, s.n, s.k, s.count,
          med, mn, s.Flops() / med * 1e-6};
}
#endif

void Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--threads N] [--reps N] [--warmup N] [--layers L] [--channels C]\n"
               "          [--vocab V] [--tokens N] [--no-fp32] [--no-bf16] [--no-openblas]\n"
               "          [--weights-in-out]  (store W as (in, out); default (out, in))\n"
               "Default shapes: config (B) L4 C256 V50257, N = B*T = 8*256 = 2048 rows.\n",
               argv0);
  std::exit(2);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> int64_t {
      if (i + 1 >= argc) Usage(argv[0]);
      return std::atoll(argv[++i]);
    };
    if (arg == "--threads") o.threads = static_cast<int>(next());
    else if (arg == "--reps") o.reps = static_cast<int>(next());
    else if (arg == "--warmup") o.warmup = static_cast<int>(next());
    else if (arg == "--layers") o.layers = next();
    else if (arg == "--channels") o.channels = next();
    else if (arg == "--vocab") o.vocab = next();
    else if (arg == "--tokens") o.tokens = next();
    else if (arg == "--no-fp32") o.dnnl_fp32 = false;
    else if (arg == "--no-bf16") o.dnnl_bf16 = false;
    else if (arg == "--no-openblas") o.openblas = false;
    else if (arg == "--weights-in-out") o.weights_in_out = true;
    else Usage(argv[0]);
  }
  if (o.threads < 1 || o.reps < 1 || o.warmup < 0 || o.layers < 1 || o.channels < 1 ||
      o.vocab < 1 || o.tokens < 1) {
    Usage(argv[0]);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  omp_set_num_threads(o.threads);
#if FT_BENCH_OPENBLAS
  openblas_set_num_threads(o.threads);
#endif
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);

  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<Row> rows;
  for (const Shape& s : StepShapes(o)) {
    std::vector<float> a(s.m * s.k), b(s.k * s.n), c(s.m * s.n);
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
    if (o.dnnl_fp32) rows.push_back(BenchDnnl(s, false, a, b, c, o, eng, strm));
    if (o.dnnl_bf16) rows.push_back(BenchDnnl(s, true, a, b, c, o, eng, strm));
#if FT_BENCH_OPENBLAS
    if (o.openblas) rows.push_back(BenchOpenBlas(s, a, b, c, o));
#endif
    for (size_t i = rows.size(); i-- > 0 && rows[i].shape == s.name;) {
      const Row& r = rows[i];
      std::fprintf(stderr, "%-14s %6lld x %6lld x %6lld  %-8s %-4s %9.3f ms %8.1f GFLOP/s  %s\n",
                   r.shape.c_str(), static_cast<long long>(r.m), static_cast<long long>(r.n),
                   static_cast<long long>(r.k), r.lib.c_str(), r.precision.c_str(), r.median_ms,
                   r.gflops, r.impl.c_str());
    }
  }

  // Flop-weighted totals per (lib, precision): one step's GEMM flops / one step's GEMM time.
  std::map<std::string, std::pair<double, double>> totals;  // key -> {flops, ms}
  for (const Row& r : rows) {
    auto& t = totals[r.lib + "_" + r.precision];
    t.first += 2.0 * r.m * r.n * r.k * r.count;
    t.second += r.median_ms * r.count;
  }

  const dnnl_version_t* v = dnnl_version();
  std::printf("{\"bench\":\"gemm_bench\",\"threads\":%d,\"reps\":%d,", o.threads, o.reps);
  std::printf("\"config\":{\"layers\":%lld,\"channels\":%lld,\"vocab\":%lld,\"tokens\":%lld},",
              static_cast<long long>(o.layers), static_cast<long long>(o.channels),
              static_cast<long long>(o.vocab), static_cast<long long>(o.tokens));
  std::printf("\"weight_layout\":\"%s\",", o.weights_in_out ? "in_out" : "out_in");
  std::printf("\"onednn_version\":\"%d.%d.%d\",\"onednn_effective_isa\":\"%s\",", v->major,
              v->minor, v->patch, IsaName(dnnl::get_effective_cpu_isa()));
#if FT_BENCH_OPENBLAS
  std::printf("\"openblas_core\":\"%s\",\"openblas_config\":\"%s\",", openblas_get_corename(),
              openblas_get_config());
#endif
  std::printf("\"totals\":{");
  bool first = true;
  for (const auto& [key, t] : totals) {
    std::printf("%s\"%s\":{\"step_gflop\":%.3f,\"step_ms\":%.3f,\"gflops\":%.1f}",
                first ? "" : ",", key.c_str(), t.first * 1e-9, t.second,
                t.first / t.second * 1e-6);
    first = false;
  }
  std::printf("},\"shapes\":[");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::printf(
        "%s{\"shape\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"count\":%d,\"lib\":\"%s\","
        "\"precision\":\"%s\",\"impl\":\"%s\",\"median_ms\":%.4f,\"min_ms\":%.4f,"
        "\"gflops\":%.1f}",
        i ? "," : "", r.shape.c_str(), static_cast<long long>(r.m), static_cast<long long>(r.n),
        static_cast<long long>(r.k), r.count, r.lib.c_str(), r.precision.c_str(), r.impl.c_str(),
        r.median_ms, r.min_ms, r.gflops);
  }
  std::printf("]}\n");
  return 0;
}
