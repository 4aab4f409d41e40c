// cuda_train_bench.cpp: GPT-2 124M training throughput on CUDA (largest micro-batch that fits) and
// MFU against a measured bf16 cuBLASLt GEMM peak.
//
//   cuda_train_bench [--mode all|gemm-peak|train] [--max-micro-batch 128] [--seq-len 1024]
//                    [--steps 10] [--warmup 3] [--precision bf16] [--gemm-size 8192]
//                    [--json FILE]
// Prints one line per result and, last, "cuda_train_bench: {json}" (also written to --json).
// Exit status 2 without a CUDA device (the reason is printed), 1 on any other failure.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../trainer/cuda/cublaslt_gemm.h"
#include "../trainer/cuda/cuda_check.h"
#include "../trainer/cuda/cuda_ops.h"
#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/trainer/device.h"
#include "ft/trainer/gpt_config.h"
#include "ft/trainer/model_backend.h"

namespace {

namespace tg = ft::trainer::gpu;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string mode = "all";
  int max_micro_batch = 128;
  int seq_len = 1024;
  int steps = 10;
  int warmup = 3;
  std::string precision = "bf16";
  int gemm_size = 8192;
  std::string json;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw ft::ConfigError(a + " needs a value");
      return argv[++i];
    };
    if (a == "--mode")
      o.mode = next();
    else if (a == "--max-micro-batch")
      o.max_micro_batch = std::stoi(next());
    else if (a == "--seq-len")
      o.seq_len = std::stoi(next());
    else if (a == "--steps")
      o.steps = std::stoi(next());
    else if (a == "--warmup")
      o.warmup = std::stoi(next());
    else if (a == "--precision")
      o.precision = next();
    else if (a == "--gemm-size")
      o.gemm_size = std::stoi(next());
    else if (a == "--json")
      o.json = next();
    else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: cuda_train_bench [--mode all|gemm-peak|train] [--max-micro-batch B] "
          "[--seq-len T] [--steps N] [--warmup N] [--precision bf16|fp16|fp32] "
          "[--gemm-size S] [--json FILE]\n");
      std::exit(0);
    } else {
      throw ft::ConfigError("unknown argument '" + a + "'");
    }
  }
  if (o.mode != "all" && o.mode != "gemm-peak" && o.mode != "train") {
    throw ft::ConfigError("--mode must be all, gemm-peak or train");
  }
  if (o.max_micro_batch < 1 || o.seq_len < 1 || o.steps < 1 || o.warmup < 0 || o.gemm_size < 256) {
    throw ft::ConfigError("bad numeric argument");
  }
  return o;
}

// bf16 GEMM peak: S x S x S on cuBLASLt (the engine's GEMM path), 5 warm-up calls, then the
// best of 3 timed loops of 20 calls (cudaEvent timing). Returns TFLOP/s.
double gemm_peak_tflops(int S) {
  tg::DeviceCachingAllocator alloc(tg::make_cuda_device_memory(0));
  cudaStream_t stream = nullptr;
  FT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const tg::StreamId sid = reinterpret_cast<tg::StreamId>(stream);
  {
    tg::LtGemm gemm(alloc, stream);
    const size_t n = static_cast<size_t>(S) * S;
    tg::DeviceBuffer<tg::bf16> a(alloc, n, sid, "a"), b(alloc, n, sid, "b"), c(alloc, n, sid, "c");
    {
      // Random operands (power and clocks depend on the data): one host row, tiled.
      std::vector<float> host(n);
      std::mt19937 rng(1);
      std::uniform_real_distribution<float> d(-1.0f, 1.0f);
      for (size_t i = 0; i < static_cast<size_t>(S); ++i) host[i] = d(rng);
      for (size_t i = S; i < n; ++i) host[i] = host[(i * 2654435761u) % S];
      tg::DeviceBuffer<float> f(alloc, n, sid, "f32");
      FT_CUDA_CHECK(cudaMemcpyAsync(f.data(), host.data(), n * 4, cudaMemcpyHostToDevice, stream));
      tg::cast_from_fp32(a.data(), f.data(), n, stream);
      tg::cast_from_fp32(b.data(), f.data(), n, stream);
    }
    auto call = [&] {
      gemm.forward(c.data(), tg::DType::kBF16, a.data(), b.data(), tg::DType::kBF16, nullptr, S, S,
                   S);
    };
    for (int i = 0; i < 5; ++i) call();
    cudaEvent_t e0, e1;
    FT_CUDA_CHECK(cudaEventCreate(&e0));
    FT_CUDA_CHECK(cudaEventCreate(&e1));
    double best_ms = 1e30;
    constexpr int kCalls = 20;
    for (int rep = 0; rep < 3; ++rep) {
      FT_CUDA_CHECK(cudaEventRecord(e0, stream));
      for (int i = 0; i < kCalls; ++i) call();
      FT_CUDA_CHECK(cudaEventRecord(e1, stream));
      FT_CUDA_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      FT_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      best_ms = std::min(best_ms, static_cast<double>(ms) / kCalls);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    FT_CUDA_CHECK(cudaStreamSynchronize(stream));
    const double flops = 2.0 * S * static_cast<double>(S) * S;
    fmt::print("gemm_peak: bf16 {}^3 on {}: {:.3f} ms per GEMM = {:.1f} TFLOP/s\n", S,
               tg::LtGemm::library_info(), best_ms, flops / (best_ms * 1e-3) / 1e12);
    cudaStreamDestroy(stream);
    return flops / (best_ms * 1e-3) / 1e12;
  }
}

struct TrainResult {
  int micro_batch = 0;
  double step_ms = 0, tokens_per_s = 0;
  std::vector<int> oom_tried;
  double final_loss = 0;
  size_t peak_allocated = 0, peak_reserved = 0;
  std::string describe;
};

TrainResult train(const Options& o) {
  ft::trainer::GptConfig g;  // GPT-2 124M
  g.num_layers = 12;
  g.num_heads = 12;
  g.channels = 768;
  g.vocab_size = 50257;
  g.padded_vocab = 50304;
  g.max_seq_len = o.seq_len;
  ft::trainer::ModelOptions mo;
  mo.precision = ft::trainer::parse_precision(o.precision);
  auto model = ft::trainer::make_cuda_backend(g, mo, {});
  {
    // The CPU model's initialisation would take a while for 124M parameters on a few cores;
    // throughput does not depend on the values, so N(0, 0.02) from a fast generator.
    std::vector<float> p(model->num_params());
    std::mt19937 rng(1337);
    std::normal_distribution<float> d(0.0f, 0.02f);
    for (auto& x : p) x = d(rng);
    model->upload_state(p.data(), nullptr, nullptr);
  }
  TrainResult r;
  r.describe = model->describe();
  const int T = o.seq_len;
  std::mt19937 rng(7);
  auto batch = [&](int B, std::vector<int32_t>& in, std::vector<int32_t>& tg) {
    in.resize(static_cast<size_t>(B) * T);
    tg.resize(in.size());
    for (auto& x : in) x = static_cast<int32_t>(rng() % g.vocab_size);
    for (auto& x : tg) x = static_cast<int32_t>(rng() % g.vocab_size);
  };
  std::vector<int32_t> in, tgt;
  ft::trainer::AdamWSettings s;
  // Largest micro-batch that fits: descending candidates, one training step each.
  const int candidates[] = {256, 192, 128, 96, 64, 48, 32, 24, 16, 12, 8, 6, 4, 2, 1};
  for (int B : candidates) {
    if (B > o.max_micro_batch) continue;
    batch(B, in, tgt);
    try {
      model->forward_backward(in.data(), tgt.data(), B, T, 1.0f / (B * T), true);
      model->grad_sum_squares();
      model->adamw_step(s, 6e-4f, 1.0f, 1);
      r.micro_batch = B;
      break;
    } catch (const ft::OutOfMemoryError& e) {
      fmt::print("train: B={} does not fit: {}\n", B, e.what());
      r.oom_tried.push_back(B);
      cudaDeviceSynchronize();
    }
  }
  if (r.micro_batch == 0) throw ft::Error("not even B=1 fits");
  const int B = r.micro_batch;
  double total_ms = 0;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    batch(B, in, tgt);
    const auto t0 = Clock::now();
    r.final_loss = model->forward_backward(in.data(), tgt.data(), B, T, 1.0f / (B * T), true);
    model->grad_sum_squares();
    model->adamw_step(s, 6e-4f, 1.0f, step + 2);  // ends with a stream sync
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (step >= o.warmup) total_ms += ms;
    fmt::print("train: step {} B={} T={} {:.1f} ms loss {:.4f}{}\n", step, B, T, ms, r.final_loss,
               step < o.warmup ? " (warm-up)" : "");
  }
  r.step_ms = total_ms / o.steps;
  r.tokens_per_s = static_cast<double>(B) * T / (r.step_ms / 1e3);
  const auto mem = model->memory_stats();
  r.peak_allocated = mem.peak_allocated;
  r.peak_reserved = mem.peak_reserved;
  return r;
}

int run(const Options& o) {
  std::string why;
  const auto devices = ft::trainer::cuda_devices(&why);
  if (devices.empty()) {
    fmt::print("cuda_train_bench: no CUDA device: {}\n", why);
    return 2;
  }
  nlohmann::json j;
  j["device"] = devices[0].name;
  j["sm"] = devices[0].sm_major * 10 + devices[0].sm_minor;
  double peak_tflops = 0;
  if (o.mode != "train") {
    peak_tflops = gemm_peak_tflops(o.gemm_size);
    j["gemm_peak_tflops"] = peak_tflops;
  }
  if (o.mode != "gemm-peak") {
    const TrainResult r = train(o);
    ft::trainer::GptConfig g;
    g.num_layers = 12;
    g.num_heads = 12;
    g.channels = 768;
    g.vocab_size = 50257;
    g.padded_vocab = 50304;
    g.max_seq_len = o.seq_len;
    const double flops_tok = ft::trainer::flops_per_token(g, o.seq_len);
    std::string spec_source;
    const double spec = ft::trainer::cuda_peak_gflops(ft::trainer::parse_precision(o.precision),
                                                      false, 0, &spec_source);
    j["engine"] = r.describe;
    j["precision"] = o.precision;
    j["seq_len"] = o.seq_len;
    j["micro_batch"] = r.micro_batch;
    j["micro_batches_oom"] = r.oom_tried;
    j["step_ms"] = r.step_ms;
    j["tokens_per_s"] = r.tokens_per_s;
    j["flops_per_token"] = flops_tok;
    j["final_loss"] = r.final_loss;
    j["peak_allocated"] = r.peak_allocated;
    j["peak_reserved"] = r.peak_reserved;
    j["spec_peak_tflops"] = spec / 1e3;
    j["spec_peak_source"] = spec_source;
    if (spec > 0) j["mfu_vs_spec"] = flops_tok * r.tokens_per_s / (spec * 1e9);
    if (peak_tflops > 0)
      j["mfu_vs_measured_gemm_peak"] = flops_tok * r.tokens_per_s / (peak_tflops * 1e12);
    fmt::print(
        "train: GPT-2 124M {} T={} B={}: {:.1f} ms/step, {:.0f} tokens/s, MFU {:.1f}% of the "
        "measured bf16 GEMM peak, {:.1f}% of the spec ({})\n",
        o.precision, o.seq_len, r.micro_batch, r.step_ms, r.tokens_per_s,
        peak_tflops > 0 ? 100 * j["mfu_vs_measured_gemm_peak"].get<double>() : 0.0,
        spec > 0 ? 100 * j["mfu_vs_spec"].get<double>() : 0.0, spec_source);
  }
  const std::string line = j.dump();
  fmt::print("cuda_train_bench: {}\n", line);
  if (!o.json.empty()) ft::write_file_atomic(o.json, line + "\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_train_bench: %s\n", e.what());
    return 1;
  }
}
