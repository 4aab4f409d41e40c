// matmul.cpp: linear-layer GEMMs: fp32/fp16 through ft's packed sgemm, bf16 through oneDNN brgemm.
#include "ft/trainer/matmul.h"

// GCC 12 reports a false -Wmaybe-uninitialized inside its own AVX-512 intrinsic headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "ft/core/annotate.h"
#include "ft/core/error.h"
#include "sgemm.h"

namespace ft::trainer {
namespace {

using dt = dnnl::memory::data_type;

bool bf16_supported();  // oneDNN has bf16 matmuls for this CPU (defined below)

// A GEMM C (M,N) [+]= A (M,K) @ B (K,N) with explicit strides on A and B.
struct GemmKey {
  int64_t M, K, N;
  int64_t a_rs, a_cs, b_rs, b_cs;  // row/column strides in elements
  dt type;                         // of A and B (f32 or bf16)
  bool accumulate;
  bool bias;
  dt c_type = dt::f32;             // of C
  bool operator==(const GemmKey& o) const {
    return M == o.M && K == o.K && N == o.N && a_rs == o.a_rs && a_cs == o.a_cs &&
           b_rs == o.b_rs && b_cs == o.b_cs && type == o.type && accumulate == o.accumulate &&
           bias == o.bias && c_type == o.c_type;
  }
};

struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const {
    const int64_t v[] = {k.M, k.K, k.N, k.a_rs, k.a_cs, k.b_rs, k.b_cs,
                         static_cast<int64_t>(k.type), k.accumulate, k.bias,
                         static_cast<int64_t>(k.c_type)};
    size_t h = 1469598103934665603ull;
    for (int64_t x : v) h = (h ^ static_cast<size_t>(x)) * 1099511628211ull;
    return h;
  }
};

struct CachedPrimitive {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c, bias, scratch;
  std::string impl;
};

// The matmul primitive descriptor for key k over cp's memory descriptors (user scratchpad,
// a sum post-op when accumulating).
dnnl::matmul::primitive_desc make_pd(const GemmKey& k, const CachedPrimitive& cp,
                                     const dnnl::engine& eng) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (k.accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  auto d = k.bias ? dnnl::matmul::desc(cp.a, cp.b, cp.bias, cp.c)
                  : dnnl::matmul::desc(cp.a, cp.b, cp.c);
  return dnnl::matmul::primitive_desc(d, attr, eng);
}

// oneDNN's scratchpad bytes for key k, without creating the primitive; for a bf16 GEMM this CPU
// only emulates, the fp32 GEMM's scratchpad plus the widened operands (and fp32 result).
size_t scratchpad_bytes(const GemmKey& k) {
  if ((k.type == dt::bf16 || k.c_type == dt::bf16) && !bf16_supported()) {
    GemmKey f = k;
    f.type = f.c_type = dt::f32;
    f.a_rs = k.K, f.a_cs = 1, f.b_rs = k.N, f.b_cs = 1;
    const size_t widened = static_cast<size_t>(k.M * k.K + k.K * k.N +
                                               (k.c_type == dt::bf16 ? k.M * k.N : 0));
    return scratchpad_bytes(f) + widened * sizeof(float);
  }
  static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  CachedPrimitive cp;
  cp.a = dnnl::memory::desc({k.M, k.K}, k.type, dnnl::memory::dims{k.a_rs, k.a_cs});
  cp.b = dnnl::memory::desc({k.K, k.N}, k.type, dnnl::memory::dims{k.b_rs, k.b_cs});
  cp.c = dnnl::memory::desc({k.M, k.N}, k.c_type, dnnl::memory::dims{k.N, 1});
  if (k.bias) cp.bias = dnnl::memory::desc({1, k.N}, dt::f32, dnnl::memory::dims{k.N, 1});
  try {
    return make_pd(k, cp, eng).scratchpad_desc().get_size();
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("oneDNN cannot create a matmul M={} K={} N={}: {}", k.M, k.K, k.N,
                            e.what()));
  }
}

}  // namespace

struct Gemm::Impl {
  explicit Impl(CachingAllocator& a) : alloc(a), eng(dnnl::engine::kind::cpu, 0), strm(eng) {}
  CachingAllocator& alloc;
  dnnl::engine eng;
  dnnl::stream strm;
  std::unordered_map<GemmKey, CachedPrimitive, GemmKeyHash> cache;
  std::string last_impl;

  CachedPrimitive& get(const GemmKey& k, uint64_t& created) {
    auto it = cache.find(k);
    if (it != cache.end()) return it->second;
    CachedPrimitive cp;
    cp.a = dnnl::memory::desc({k.M, k.K}, k.type, dnnl::memory::dims{k.a_rs, k.a_cs});
    cp.b = dnnl::memory::desc({k.K, k.N}, k.type, dnnl::memory::dims{k.b_rs, k.b_cs});
    cp.c = dnnl::memory::desc({k.M, k.N}, k.c_type, dnnl::memory::dims{k.N, 1});
    if (k.bias) cp.bias = dnnl::memory::desc({1, k.N}, dt::f32, dnnl::memory::dims{k.N, 1});
    try {
      dnnl::matmul::primitive_desc pd = make_pd(k, cp, eng);
      cp.scratch = pd.scratchpad_desc();
      cp.impl = pd.impl_info_str();
      cp.prim = dnnl::matmul(pd);
    } catch (const dnnl::error& e) {
      throw Error(fmt::format("oneDNN cannot create a matmul M={} K={} N={}: {}", k.M, k.K, k.N,
                              e.what()));
    }
    ++created;
    last_impl = cp.impl;
    return cache.emplace(k, std::move(cp)).first->second;
  }

  // C (M,N) [+]= A @ B (+ bias).
  void run(const GemmKey& k, const void* A, const void* B, void* C, const float* bias,
           uint64_t& created) {
    if ((k.type == dt::bf16 || k.c_type == dt::bf16) && !bf16_supported()) {
      run_bf16_emulated(k, A, B, C, bias, created);
      return;
    }
    CachedPrimitive& cp = get(k, created);
    size_t scratch_bytes = cp.scratch.get_size();
    Buffer<char> scratch;
    if (scratch_bytes) scratch = Buffer<char>(alloc, scratch_bytes, "onednn_scratchpad");
    dnnl::memory ma(cp.a, eng, const_cast<void*>(A));
    dnnl::memory mb(cp.b, eng, const_cast<void*>(B));
    dnnl::memory mc(cp.c, eng, C);
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    if (k.bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(cp.bias, eng, const_cast<float*>(bias)));
    if (scratch_bytes) args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(cp.scratch, eng, scratch.data()));
    cp.prim.execute(strm, args);
    strm.wait();
  }

  // A CPU without bf16 GEMM kernels in oneDNN (AVX2 only: oneDNN 2.6 has no bf16 matmul below
  // avx512_core): the bf16 operands are widened exactly to fp32, multiplied by the fp32 GEMM
  // (fp32 accumulation, as oneDNN's bf16 kernels do) and a bf16 result is rounded to nearest
  // even, so the numerics are those of a bf16 GEMM with fp32 accumulation.
  void run_bf16_emulated(const GemmKey& k, const void* A, const void* B, void* C,
                         const float* bias, uint64_t& created) {
    auto widen = [&](const void* src, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                     dt type, const char* tag) {
      Buffer<float> out(alloc, static_cast<size_t>(rows * cols), tag);
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          out.data()[i * cols + j] =
              type == dt::bf16 ? bf16_to_fp32_scalar(static_cast<const uint16_t*>(src)[i * rs + j * cs])
                               : static_cast<const float*>(src)[i * rs + j * cs];
        }
      }
      return out;
    };
    const Buffer<float> a = widen(A, k.M, k.K, k.a_rs, k.a_cs, k.type, "gemm_bf16_emul_a");
    const Buffer<float> b = widen(B, k.K, k.N, k.b_rs, k.b_cs, k.type, "gemm_bf16_emul_b");
    GemmKey f = k;
    f.type = dt::f32;
    f.a_rs = k.K, f.a_cs = 1, f.b_rs = k.N, f.b_cs = 1;
    f.c_type = dt::f32;
    if (k.c_type == dt::f32) {
      run(f, a.data(), b.data(), C, bias, created);
      return;
    }
    const size_t n = static_cast<size_t>(k.M * k.N);
    Buffer<float> c(alloc, n, "gemm_bf16_emul_c");
    if (k.accumulate) bf16_to_fp32(c.data(), static_cast<const uint16_t*>(C), n);
    run(f, a.data(), b.data(), c.data(), bias, created);
    fp32_to_bf16(static_cast<uint16_t*>(C), c.data(), n);
  }
};

namespace {

// Whether oneDNN can run bf16 matmuls on this CPU (decided once per process by creating one).
bool bf16_supported() {
  static const bool ok = [] {
    try {
      const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
      const dnnl::memory::desc a({16, 16}, dt::bf16, dnnl::memory::dims{16, 1});
      const dnnl::memory::desc c({16, 16}, dt::f32, dnnl::memory::dims{16, 1});
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), eng);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

}  // namespace

namespace {

// Which fp32 GEMM backend to use, read once per process from FT_GEMM: unset or "ft" selects
// ft's sgemm (faster than oneDNN 2.6 fp32 on every linear-layer shape of configs A and B, see
// bench/sgemm_bench), "onednn" the oneDNN matmul for comparison. A static choice, never a
// runtime timing race, so runs stay bit-reproducible across processes.
bool env_selects_onednn() {
  static const bool onednn = [] {
    const char* v = std::getenv("FT_GEMM");
    if (!v || !*v || std::strcmp(v, "ft") == 0) return false;
    if (std::strcmp(v, "onednn") == 0) return true;
    throw ConfigError(fmt::format("FT_GEMM='{}': expected 'ft' or 'onednn'", v));
  }();
  return onednn;
}

// fp32 and emulated fp16 (fp32 GEMM on fp16-rounded operands) go through ft's sgemm when its
// AVX-512 kernel is compiled in; bf16 always uses oneDNN (its bf16 brgemm has no ft rival).
bool use_ft_sgemm(Precision p) {
  return p != Precision::kBf16 && ops::sgemm_is_vectorised() && !env_selects_onednn();
}

// Forward (NT) GEMMs with few rows stay on oneDNN: with N = 256 rows (config A) ft's sgemm
// amortises the transposing pack of the whole weight over too few rows and measured 10-25%
// below oneDNN on every forward shape, while with N = 2048 (config B) it is level or ahead
// (bench/sgemm_bench). A fixed shape rule, so every process makes the same choice.
constexpr int kMinRowsForFtForward = 1024;

}  // namespace

Gemm::Gemm(CachingAllocator& alloc) : impl_(std::make_unique<Impl>(alloc)) {}
Gemm::~Gemm() = default;

std::string Gemm::last_impl() const { return impl_->last_impl; }

std::string Gemm::library_info() {
  const dnnl_version_t* v = dnnl::version();
  const char* isa = "unknown";
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx: isa = "avx512_core_amx"; break;
    case dnnl::cpu_isa::avx512_core_bf16: isa = "avx512_core_bf16"; break;
    case dnnl::cpu_isa::avx512_core_vnni: isa = "avx512_core_vnni"; break;
    case dnnl::cpu_isa::avx512_core: isa = "avx512_core"; break;
    case dnnl::cpu_isa::avx2_vnni: isa = "avx2_vnni"; break;
    case dnnl::cpu_isa::avx2: isa = "avx2"; break;
    default: break;
  }
  return fmt::format("{} fp32/fp16, oneDNN {}.{}.{} (max ISA {}) bf16{}",
                     use_ft_sgemm(Precision::kFp32) ? "ft sgemm" : "oneDNN", v->major, v->minor,
                     v->patch, isa,
                     bf16_supported() ? "" : " emulated (fp32 GEMM on bf16 operands: no bf16 "
                                             "matmul for this CPU)");
}

namespace {

// Prepares an activation operand for precision p: returns a pointer to the
// bf16 bits (bf16), fp16-rounded floats (fp16) or the input itself (fp32).
const void* prepare(Buffer<char>& scratch, CachingAllocator& alloc, const float* x, size_t n,
                    Precision p, const char* tag) {
  if (p == Precision::kFp32) return x;
  if (p == Precision::kBf16) {
    scratch = Buffer<char>(alloc, n * sizeof(uint16_t), tag);
    fp32_to_bf16(reinterpret_cast<uint16_t*>(scratch.data()), x, n);
    return scratch.data();
  }
  scratch = Buffer<char>(alloc, n * sizeof(float), tag);
  round_through_fp16(reinterpret_cast<float*>(scratch.data()), x, n);
  return scratch.data();
}

dt operand_type(Precision p) { return p == Precision::kBf16 ? dt::bf16 : dt::f32; }

const void* weight_operand(const float* w, LowPrecisionWeight w_lp, Precision p) {
  if (p == Precision::kFp32) return w;
  if (!w_lp) throw Error("matmul: low-precision weight copy missing for non-fp32 precision");
  return w_lp;
}

// dbias (OC) += sum over rows of dout (N,OC). Deterministic: each column is
// summed in row order by one thread.
void bias_backward(float* dbias, const float* dout, int N, int OC) {
  constexpr int kBlock = 64;
  const int blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int bi = 0; bi < blocks; ++bi) {
    const int o0 = bi * kBlock, o1 = std::min(OC, o0 + kBlock);
    float acc[kBlock] = {};
    for (int n = 0; n < N; ++n) {
      const float* row = dout + static_cast<size_t>(n) * OC;
#pragma omp simd
      for (int o = o0; o < o1; ++o) acc[o - o0] += row[o];
    }
    for (int o = o0; o < o1; ++o) dbias[o] += acc[o - o0];
  }
}

// out (N,OC) += bias (OC) broadcast over rows.
void add_bias_rows(float* out, const float* bias, int N, int OC) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* row = out + static_cast<size_t>(n) * OC;
    int o = 0;
#if defined(__AVX512F__)
    for (; o + 16 <= OC; o += 16) {
      _mm512_storeu_ps(row + o, _mm512_add_ps(_mm512_loadu_ps(row + o), _mm512_loadu_ps(bias + o)));
    }
#endif
    for (; o < OC; ++o) row[o] += bias[o];
  }
}

}  // namespace

void Gemm::forward(float* out, const float* inp, const float* weight, LowPrecisionWeight weight_lp,
                   const float* bias, int N, int IC, int OC, Precision p) {
  FT_RANGE("matmul.fwd", RangeKind::kCompute, OC);
  Buffer<char> a_scratch;
  const void* A = prepare(a_scratch, impl_->alloc, inp, static_cast<size_t>(N) * IC, p, "gemm_a");
  const void* B = weight_operand(weight, weight_lp, p);
  if (use_ft_sgemm(p) && N >= kMinRowsForFtForward) {
    // out (N,OC) = inp (N,IC) @ weight (OC,IC)^T, then + bias row.
    ops::sgemm(false, true, N, OC, IC, static_cast<const float*>(A), IC,
               static_cast<const float*>(B), IC, 0.0f, out, OC);
    if (bias) add_bias_rows(out, bias, N, OC);
  } else {
    // A = inp (N,IC) row-major; B = weight^T (IC,OC): element (k,n) at weight[n*IC + k].
    GemmKey k{N, IC, OC, IC, 1, 1, IC, operand_type(p), false, bias != nullptr};
    impl_->run(k, A, B, out, bias, stats_.primitives_created);
  }
  ++stats_.calls;
  stats_.flops += 2.0 * N * IC * OC;
}

void Gemm::backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                    const float* weight, LowPrecisionWeight weight_lp, int N, int IC, int OC,
                    bool accumulate_dweight, Precision p) {
  FT_RANGE("matmul.bwd", RangeKind::kCompute, OC);
  Buffer<char> d_scratch, a_scratch;
  const void* D = prepare(d_scratch, impl_->alloc, dout, static_cast<size_t>(N) * OC, p, "gemm_dout");
  const dt type = operand_type(p);
  if (dinp) {
    // dinp (N,IC) = dout (N,OC) @ weight (OC,IC).
    const void* W = weight_operand(weight, weight_lp, p);
    if (use_ft_sgemm(p)) {
      ops::sgemm(false, false, N, IC, OC, static_cast<const float*>(D), OC,
                 static_cast<const float*>(W), IC, 0.0f, dinp, IC);
    } else {
      GemmKey k{N, OC, IC, OC, 1, IC, 1, type, false, false};
      impl_->run(k, D, W, dinp, nullptr, stats_.primitives_created);
    }
    ++stats_.calls;
    stats_.flops += 2.0 * N * IC * OC;
  }
  if (dweight) {
    // dweight (OC,IC) [+]= dout^T (OC,N) @ inp (N,IC); dout^T(m,k) = dout[k*OC + m].
    const void* X = prepare(a_scratch, impl_->alloc, inp, static_cast<size_t>(N) * IC, p, "gemm_a");
    if (use_ft_sgemm(p)) {
      ops::sgemm(true, false, OC, IC, N, static_cast<const float*>(D), OC,
                 static_cast<const float*>(X), IC, accumulate_dweight ? 1.0f : 0.0f, dweight, IC);
    } else {
      GemmKey k{OC, N, IC, 1, OC, IC, 1, type, accumulate_dweight, false};
      impl_->run(k, D, X, dweight, nullptr, stats_.primitives_created);
    }
    ++stats_.calls;
    stats_.flops += 2.0 * N * IC * OC;
  }
  if (dbias) bias_backward(dbias, dout, N, OC);
}

void Gemm::forward_bf16_out(uint16_t* out, const float* inp, LowPrecisionWeight weight_lp, int N,
                            int IC, int OC) {
  FT_RANGE("matmul.fwd", RangeKind::kCompute, OC);
  Buffer<char> a_scratch;
  const void* A = prepare(a_scratch, impl_->alloc, inp, static_cast<size_t>(N) * IC,
                          Precision::kBf16, "gemm_a");
  const void* B = weight_operand(nullptr, weight_lp, Precision::kBf16);
  GemmKey k{N, IC, OC, IC, 1, 1, IC, dt::bf16, false, false, dt::bf16};
  impl_->run(k, A, B, out, nullptr, stats_.primitives_created);
  ++stats_.calls;
  stats_.flops += 2.0 * N * IC * OC;
}

void Gemm::backward_bf16_dout(float* dinp, float* dweight, const uint16_t* dout, const float* inp,
                              LowPrecisionWeight weight_lp, int N, int IC, int OC,
                              bool accumulate_dweight) {
  FT_RANGE("matmul.bwd", RangeKind::kCompute, OC);
  if (dinp) {
    const void* W = weight_operand(nullptr, weight_lp, Precision::kBf16);
    GemmKey k{N, OC, IC, OC, 1, IC, 1, dt::bf16, false, false};
    impl_->run(k, dout, W, dinp, nullptr, stats_.primitives_created);
    ++stats_.calls;
    stats_.flops += 2.0 * N * IC * OC;
  }
  if (dweight) {
    Buffer<char> a_scratch;
    const void* X = prepare(a_scratch, impl_->alloc, inp, static_cast<size_t>(N) * IC,
                            Precision::kBf16, "gemm_a");
    GemmKey k{OC, N, IC, 1, OC, IC, 1, dt::bf16, accumulate_dweight, false};
    impl_->run(k, dout, X, dweight, nullptr, stats_.primitives_created);
    ++stats_.calls;
    stats_.flops += 2.0 * N * IC * OC;
  }
}

void Gemm::bf16_gemm(float* c, const uint16_t* a, int64_t a_rs, int64_t a_cs, const uint16_t* b,
                     int64_t b_rs, int64_t b_cs, int M, int K, int N, bool accumulate) {
  FT_RANGE("matmul.bf16", RangeKind::kCompute, N);
  GemmKey k{M, K, N, a_rs, a_cs, b_rs, b_cs, dt::bf16, accumulate, false};
  impl_->run(k, a, b, c, nullptr, stats_.primitives_created);
  ++stats_.calls;
  stats_.flops += 2.0 * M * K * N;
}

size_t Gemm::transient_bytes(Call call, int N, int IC, int OC, Precision p, bool has_bias,
                             bool accumulate_dweight, size_t round_to) {
  auto r = [round_to](size_t b) { return b == 0 ? 0 : (b + round_to - 1) / round_to * round_to; };
  const size_t n = static_cast<size_t>(N), ic = static_cast<size_t>(IC), oc = static_cast<size_t>(OC);
  // Bytes prepare() allocates for an operand of `count` floats.
  auto operand = [&](size_t count) -> size_t {
    if (p == Precision::kFp32) return 0;
    return r(count * (p == Precision::kBf16 ? 2 : 4));
  };
  const dt type = operand_type(p);
  switch (call) {
    case Call::kForward: {
      const size_t a = operand(n * ic);
      if (use_ft_sgemm(p) && N >= kMinRowsForFtForward) return a;
      return a + r(scratchpad_bytes(GemmKey{N, IC, OC, IC, 1, 1, IC, type, false, has_bias}));
    }
    case Call::kBackward: {
      const size_t d = operand(n * oc);
      size_t dinp = 0, dweight = operand(n * ic);
      if (!use_ft_sgemm(p)) {
        dinp = r(scratchpad_bytes(GemmKey{N, OC, IC, OC, 1, IC, 1, type, false, false}));
        dweight += r(scratchpad_bytes(
            GemmKey{OC, N, IC, 1, OC, IC, 1, type, accumulate_dweight, false}));
      }
      return d + std::max(dinp, dweight);
    }
    case Call::kForwardBf16Out:
      return r(n * ic * 2) +
             r(scratchpad_bytes(GemmKey{N, IC, OC, IC, 1, 1, IC, dt::bf16, false, false, dt::bf16}));
    case Call::kBackwardBf16Dout: {
      const size_t dinp =
          r(scratchpad_bytes(GemmKey{N, OC, IC, OC, 1, IC, 1, dt::bf16, false, false}));
      const size_t dweight =
          r(n * ic * 2) +
          r(scratchpad_bytes(GemmKey{OC, N, IC, 1, OC, IC, 1, dt::bf16, accumulate_dweight, false}));
      return std::max(dinp, dweight);
    }
  }
  return 0;
}

}  // namespace ft::trainer
