// cublaslt_gemm.cu: every cuBLASLt call of ft: plans cached per shape (descriptors, layouts, the
// heuristic's algorithm), bias epilogue with a kernel fallback, workspace from the device
// allocator.
#include <cublasLt.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <string>
#include <type_traits>
#include <unordered_map>

#include "cublaslt_gemm.h"
#include "cuda_check.h"
#include "cuda_ops.h"
#include "ft/core/annotate.h"
#include "ft/core/error.h"

namespace ft::trainer::gpu {
namespace {

// cuBLASLt is loaded on first use (dlopen), not linked: merely loading libcublasLt runs its
// static initialisers, ~0.4 s per process on the build machine, which every test binary and
// CPU-only ft-train run would pay.
struct LtApi {
#define FT_LT_FN(name) decltype(&::name) name = nullptr;
  FT_LT_FN(cublasLtCreate)
  FT_LT_FN(cublasLtDestroy)
  FT_LT_FN(cublasLtGetVersion)
  FT_LT_FN(cublasLtGetStatusName)
  FT_LT_FN(cublasLtGetStatusString)
  FT_LT_FN(cublasLtMatmulDescCreate)
  FT_LT_FN(cublasLtMatmulDescDestroy)
  FT_LT_FN(cublasLtMatmulDescSetAttribute)
  FT_LT_FN(cublasLtMatrixLayoutCreate)
  FT_LT_FN(cublasLtMatrixLayoutDestroy)
  FT_LT_FN(cublasLtMatmulPreferenceCreate)
  FT_LT_FN(cublasLtMatmulPreferenceDestroy)
  FT_LT_FN(cublasLtMatmulPreferenceSetAttribute)
  FT_LT_FN(cublasLtMatmulAlgoGetHeuristic)
  FT_LT_FN(cublasLtMatmul)
#undef FT_LT_FN
};

const LtApi& lt() {
  static const LtApi api = [] {
    const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr)
      h = dlopen((std::string(FT_CUDA_LIBRARY_DIR) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      throw Error("cannot load cuBLASLt (" + soname + " or " FT_CUDA_LIBRARY_DIR "/" + soname +
                  "): " + dlerror());
    }
    LtApi a;
    auto load = [h](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (fn == nullptr) throw Error(std::string("cuBLASLt has no symbol ") + name);
    };
#define FT_LT_LOAD(name) load(a.name, #name);
    FT_LT_LOAD(cublasLtCreate)
    FT_LT_LOAD(cublasLtDestroy)
    FT_LT_LOAD(cublasLtGetVersion)
    FT_LT_LOAD(cublasLtGetStatusName)
    FT_LT_LOAD(cublasLtGetStatusString)
    FT_LT_LOAD(cublasLtMatmulDescCreate)
    FT_LT_LOAD(cublasLtMatmulDescDestroy)
    FT_LT_LOAD(cublasLtMatmulDescSetAttribute)
    FT_LT_LOAD(cublasLtMatrixLayoutCreate)
    FT_LT_LOAD(cublasLtMatrixLayoutDestroy)
    FT_LT_LOAD(cublasLtMatmulPreferenceCreate)
    FT_LT_LOAD(cublasLtMatmulPreferenceDestroy)
    FT_LT_LOAD(cublasLtMatmulPreferenceSetAttribute)
    FT_LT_LOAD(cublasLtMatmulAlgoGetHeuristic)
    FT_LT_LOAD(cublasLtMatmul)
#undef FT_LT_LOAD
    return a;
  }();
  return api;
}

}  // namespace
}  // namespace ft::trainer::gpu

#define FT_CUBLAS_CHECK(expr)                                                                     \
  do {                                                                                            \
    cublasStatus_t ft_cublas_st_ = (expr);                                                        \
    if (ft_cublas_st_ != CUBLAS_STATUS_SUCCESS) {                                                 \
      throw ::ft::Error(std::string(#expr) + ": " + lt().cublasLtGetStatusName(ft_cublas_st_) +   \
                        " (" + lt().cublasLtGetStatusString(ft_cublas_st_) + ") at " + __FILE__ + \
                        ":" + std::to_string(__LINE__));                                          \
    }                                                                                             \
  } while (0)

namespace ft::trainer::gpu {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

// The largest power of two <= 256 that divides the address (cuBLASLt's alignment classes).
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

struct PlanKey {
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldd;
  DType at, bt, dt;
  GemmMath math;
  bool bias;
  uint32_t al_a, al_b, al_d, al_bias, al_bias_d;  // al_bias_d: 0 without a bias in D's type
  bool operator==(const PlanKey& o) const {
    return ta == o.ta && tb == o.tb && m == o.m && n == o.n && k == o.k && lda == o.lda &&
           ldb == o.ldb && ldd == o.ldd && at == o.at && bt == o.bt && dt == o.dt &&
           math == o.math && bias == o.bias && al_a == o.al_a && al_b == o.al_b && al_d == o.al_d &&
           al_bias == o.al_bias && al_bias_d == o.al_bias_d;
  }
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    const int64_t v[] = {k.ta,
                         k.tb,
                         k.m,
                         k.n,
                         k.k,
                         k.lda,
                         k.ldb,
                         k.ldd,
                         static_cast<int64_t>(k.at),
                         static_cast<int64_t>(k.bt),
                         static_cast<int64_t>(k.dt),
                         static_cast<int64_t>(k.math),
                         k.bias,
                         k.al_a,
                         k.al_b,
                         k.al_d,
                         k.al_bias,
                         k.al_bias_d};
    size_t h = 1469598103934665603ull;
    for (int64_t x : v) h = (h ^ static_cast<size_t>(x)) * 1099511628211ull;
    return h;
  }
};

}  // namespace

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "fp32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "fp16";
  }
  return "?";
}

size_t dtype_bytes(DType t) { return t == DType::kF32 ? 4 : 2; }

struct LtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool bias_epilogue = false;  // false with a bias: the add kernel runs after the GEMM
  bool bias_in_d = false;      // the epilogue reads the bias in D's type (bias_d)
  ~Plan() {
    if (a) lt().cublasLtMatrixLayoutDestroy(a);
    if (b) lt().cublasLtMatrixLayoutDestroy(b);
    if (d) lt().cublasLtMatrixLayoutDestroy(d);
    if (desc) lt().cublasLtMatmulDescDestroy(desc);
  }
};

struct LtGemm::Impl {
  cublasLtHandle_t handle = nullptr;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;
  ~Impl() {
    plans.clear();
    if (handle) lt().cublasLtDestroy(handle);
  }
};

LtGemm::LtGemm(DeviceCachingAllocator& alloc, cudaStream_t stream, size_t workspace_bytes)
    : alloc_(alloc), stream_(stream), impl_(std::make_unique<Impl>()) {
  FT_CUBLAS_CHECK(lt().cublasLtCreate(&impl_->handle));
  workspace_ = DeviceBuffer<char>(alloc_, workspace_bytes, reinterpret_cast<StreamId>(stream),
                                  "cublaslt.workspace");
}

LtGemm::~LtGemm() = default;

size_t LtGemm::cached_plans() const { return impl_->plans.size(); }

std::string LtGemm::library_info() {
  const size_t v = lt().cublasLtGetVersion();
  return fmt::format("cuBLASLt {}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

void LtGemm::matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* a,
                    DType a_t, int64_t lda, const void* b, DType b_t, int64_t ldb, void* d,
                    DType d_t, int64_t ldd, float beta, const float* bias, int bias_rows,
                    const void* bias_d) {
  if (bias == nullptr || d_t == DType::kF32) bias_d = nullptr;
  const bool fp32_in = a_t == DType::kF32;
  const GemmMath math = fp32_in ? math_ : GemmMath::kFp32;
  PlanKey key{trans_a,
              trans_b,
              m,
              n,
              k,
              lda,
              ldb,
              ldd,
              a_t,
              b_t,
              d_t,
              math,
              bias != nullptr,
              alignment(a),
              alignment(b),
              alignment(d),
              bias ? alignment(bias) : 0u,
              bias_d ? alignment(bias_d) : 0u};
  auto it = impl_->plans.find(key);
  if (it == impl_->plans.end()) {
    FT_RANGE("gemm.plan", RangeKind::kHost);
    auto plan = std::make_unique<Plan>();
    const cublasComputeType_t compute =
        math == GemmMath::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    auto make_desc = [&] {  // a fresh descriptor: no epilogue and no bias attributes
      if (plan->desc) lt().cublasLtMatmulDescDestroy(plan->desc);
      plan->desc = nullptr;
      FT_CUBLAS_CHECK(lt().cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F));
      FT_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                          &op_a, sizeof(op_a)));
      FT_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                          &op_b, sizeof(op_b)));
    };
    make_desc();
    // Stored shapes: op(A) is (m,k), op(B) is (k,n); D (m,n); all column-major.
    FT_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&plan->a, cuda_type(a_t), trans_a ? k : m,
                                                    trans_a ? m : k, lda));
    FT_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&plan->b, cuda_type(b_t), trans_b ? n : k,
                                                    trans_b ? k : n, ldb));
    FT_CUBLAS_CHECK(lt().cublasLtMatrixLayoutCreate(&plan->d, cuda_type(d_t), m, n, ldd));
    cublasLtMatmulPreference_t pref = nullptr;
    FT_CUBLAS_CHECK(lt().cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = workspace_.bytes();
    const uint32_t al[4] = {key.al_a, key.al_b, key.al_d, key.al_d};
    const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    cublasStatus_t st = lt().cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; ++i) {
      st = lt().cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &al[i], sizeof(al[i]));
    }
    auto heuristic = [&](cublasLtMatmulHeuristicResult_t* r) {
      int found = 0;
      const cublasStatus_t hs = lt().cublasLtMatmulAlgoGetHeuristic(
          impl_->handle, plan->desc, plan->a, plan->b, plan->d, plan->d, pref, 1, r, &found);
      return hs == CUBLAS_STATUS_SUCCESS && found > 0;
    };
    cublasLtMatmulHeuristicResult_t result{};
    bool ok = false;
    if (st == CUBLAS_STATUS_SUCCESS && bias != nullptr) {
      // Bias epilogue: the bias added in the GEMM's epilogue, fp32 first, else in D's type.
      auto try_epilogue = [&](cudaDataType_t bias_t, const void* ptr) {
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        return lt().cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                   sizeof(epi)) == CUBLAS_STATUS_SUCCESS &&
               lt().cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                   &bias_t,
                                                   sizeof(bias_t)) == CUBLAS_STATUS_SUCCESS &&
               lt().cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &ptr, sizeof(ptr)) == CUBLAS_STATUS_SUCCESS &&
               heuristic(&result);
      };
      ok = try_epilogue(CUDA_R_32F, bias);
      if (!ok && bias_d != nullptr) {
        make_desc();
        ok = plan->bias_in_d = try_epilogue(cuda_type(d_t), bias_d);
      }
      plan->bias_epilogue = ok;
      // No epilogue for this shape/type (cuBLASLt 13.1 on an H200 has none for an fp32 bias
      // with a 16-bit D): plain GEMM, then the add kernel, on a fresh descriptor (with the bias
      // attributes left set and the epilogue reset, that heuristic found no algorithm either).
      if (!ok) make_desc();
    }
    if (!ok && st == CUBLAS_STATUS_SUCCESS) ok = heuristic(&result);
    lt().cublasLtMatmulPreferenceDestroy(pref);
    FT_CUBLAS_CHECK(st);
    if (!ok) {
      throw Error(fmt::format(
          "cuBLASLt has no algorithm for D({}x{}) = op{}(A {}) op{}(B {}) -> {} (k={}, lda={}, "
          "ldb={}, ldd={}, {})",
          m, n, trans_a ? "T" : "N", dtype_name(a_t), trans_b ? "T" : "N", dtype_name(b_t),
          dtype_name(d_t), k, lda, ldb, ldd, math == GemmMath::kTf32 ? "tf32" : "fp32 compute"));
    }
    plan->algo = result.algo;
    ++stats_.primitives_created;
    it = impl_->plans.emplace(key, std::move(plan)).first;
  }
  Plan& plan = *it->second;
  if (plan.bias_epilogue) {
    const void* ptr = plan.bias_in_d ? bias_d : static_cast<const void*>(bias);
    FT_CUBLAS_CHECK(lt().cublasLtMatmulDescSetAttribute(
        plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr, sizeof(ptr)));
  }
  const float alpha = 1.0f;
  FT_CUBLAS_CHECK(lt().cublasLtMatmul(impl_->handle, plan.desc, &alpha, a, plan.a, b, plan.b, &beta,
                                      d, plan.d, d, plan.d, &plan.algo, workspace_.data(),
                                      workspace_.bytes(), stream_));
  ++stats_.calls;
  stats_.flops += 2.0 * static_cast<double>(m) * n * k;
  if (bias != nullptr) {
    if (plan.bias_epilogue) {
      ++bias_epilogue_calls_;
    } else {
      // D is (bias_rows = m, n) column-major = (n, m) row-major: add bias (m) to every row.
      ++bias_kernel_calls_;
      switch (d_t) {
        case DType::kF32:
          add_bias(static_cast<float*>(d), bias, static_cast<int>(n), bias_rows, stream_);
          break;
        case DType::kBF16:
          add_bias(static_cast<bf16*>(d), bias, static_cast<int>(n), bias_rows, stream_);
          break;
        case DType::kF16:
          add_bias(static_cast<fp16*>(d), bias, static_cast<int>(n), bias_rows, stream_);
          break;
      }
    }
  }
}

void LtGemm::forward(void* out, DType out_t, const void* inp, const void* weight, DType in_t,
                     const float* bias, int N, int IC, int OC, const void* bias_d) {
  // out^T (OC,N) = W (OC,IC) inp^T: A = weight stored (IC,OC) col-major, transposed;
  // B = inp stored (IC,N) col-major.
  matmul(true, false, OC, N, IC, weight, in_t, IC, inp, in_t, IC, out, out_t, OC, 0.0f, bias, OC,
         bias_d);
}

void LtGemm::backward_input(void* dinp, DType out_t, const void* dout, const void* weight,
                            DType in_t, int N, int IC, int OC, bool accumulate) {
  // dinp^T (IC,N) = W^T (IC,OC) dout^T (OC,N): A = weight stored (IC,OC); B = dout stored (OC,N).
  matmul(false, false, IC, N, OC, weight, in_t, IC, dout, in_t, OC, dinp, out_t, IC,
         accumulate ? 1.0f : 0.0f, nullptr, 0);
}

void LtGemm::backward_weight(float* dweight, const void* dout, const void* inp, DType in_t, int N,
                             int IC, int OC, bool accumulate) {
  // dW^T (IC,OC) = inp^T (IC,N) dout (N,OC): A = inp stored (IC,N); B = dout stored (OC,N),
  // transposed.
  matmul(false, true, IC, OC, N, inp, in_t, IC, dout, in_t, OC, dweight, DType::kF32, IC,
         accumulate ? 1.0f : 0.0f, nullptr, 0);
}

}  // namespace ft::trainer::gpu
