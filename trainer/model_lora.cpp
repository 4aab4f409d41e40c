// model_lora.cpp: GptModel under QLoRA: the block linears in NF4 with low-rank adapters, the
// linear-layer dispatch (GEMM or NF4 + adapter), adapter initialisation and merging.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "ft/core/error.h"
#include "ft/core/rng.h"
#include "ft/trainer/lora_linear.h"
#include "ft/trainer/model.h"
#include "model_internal.h"
#include "ops/sgemm.h"

namespace ft::trainer {

namespace {

constexpr int kBlockLinears[] = {kQkvw, kAttprojw, kFcw, kFcprojw};

bool is_block_linear(int index) {
  return index == kQkvw || index == kAttprojw || index == kFcw || index == kFcprojw;
}

// (OC, IC) of one layer's block linear.
std::array<int, 2> linear_shape(int index, int C) {
  switch (index) {
    case kQkvw:
      return {3 * C, C};
    case kAttprojw:
      return {C, C};
    case kFcw:
      return {4 * C, C};
    default:
      return {C, 4 * C};  // kFcprojw
  }
}

uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The LoRA linear's shape for block linear `index` (rank 0 where it has no adapter; dropout
// only in a training forward).
LoraShape shape_of(const LoraConfig& cfg, int index, bool training, int N, int IC, int OC,
                   bool bf16) {
  const bool adapter = cfg.targets(index);
  LoraShape shape;
  shape.N = N;
  shape.IC = IC;
  shape.OC = OC;
  shape.rank = adapter ? cfg.rank : 0;
  shape.scale = cfg.scale();
  shape.dropout = adapter && training ? cfg.dropout : 0.0f;
  shape.bf16 = bf16;
  return shape;
}

// The adapter input's dropout mask of layer l's linear `index` for this micro-batch's key
// (empty without dropout): the forward and the backward (and a recompute) draw the same.
Buffer<uint8_t> keep_mask(CachingAllocator& alloc, const LoraShape& shape, uint64_t key, int l,
                          int index) {
  Buffer<uint8_t> keep;
  if (shape.dropout <= 0) return keep;
  const size_t n = static_cast<size_t>(shape.N) * static_cast<size_t>(shape.IC);
  keep = Buffer<uint8_t>(alloc, n, "lora.keep");
  lora_dropout_mask(keep.data(), n, shape.dropout,
                    key ^ mix64((static_cast<uint64_t>(l) << 8) | static_cast<uint64_t>(index)));
  return keep;
}

}  // namespace

bool LoraConfig::targets(int index) const {
  if (index == kQkvw || index == kAttprojw) return attn;
  if (index == kFcw || index == kFcprojw) return mlp;
  return false;
}

std::string LoraConfig::targets_text() const {
  if (attn && mlp) return "attn,mlp";
  return attn ? "attn" : (mlp ? "mlp" : "");
}

void parse_lora_targets(const std::string& text, LoraConfig& cfg) {
  cfg.attn = cfg.mlp = false;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string part = text.substr(start, end - start);
    if (part == "attn") {
      cfg.attn = true;
    } else if (part == "mlp") {
      cfg.mlp = true;
    } else {
      throw ConfigError(fmt::format("--lora-targets '{}': '{}' is not attn or mlp", text, part));
    }
    start = end + 1;
  }
}

void GptModel::setup_lora() {
  const LoraConfig& cfg = options_.lora;
  if (tp_ > 1 || !whole_model()) {
    throw ConfigError("--qlora needs the whole model on one rank (no --tp or --pp)");
  }
  if (options_.precision == Precision::kFp16) {
    throw ConfigError(
        "--qlora dequantizes its NF4 weights into fp32 or bf16 GEMM operands; --precision fp16 "
        "is not supported with it");
  }
  if (!cfg.attn && !cfg.mlp) throw ConfigError("--lora-targets names no linear");
  if (!(cfg.dropout >= 0 && cfg.dropout < 1)) {
    throw ConfigError(fmt::format("--lora-dropout {} is not in [0, 1)", cfg.dropout));
  }
  lora_ = std::make_unique<LoraState>();
  lora_->cfg = cfg;
  const size_t L = config_.num_layers, r = cfg.rank;
  // The block linears leave the fp32 buffers: size 0 in the layout.
  layout_ = layout_.without(is_block_linear);
  for (int i : kBlockLinears) {
    lora_->nf4[i].resize(L);
    if (!cfg.targets(i)) continue;
    const auto [OC, IC] = linear_shape(i, config_.channels);
    lora_->a_off[i] = lora_->count;
    lora_->stride[i] = r * static_cast<size_t>(IC) + static_cast<size_t>(OC) * r;
    lora_->count += L * lora_->stride[i];
  }
  lora_->params = Buffer<float>(alloc_, lora_->count, "lora.params");
  lora_->grads = Buffer<float>(alloc_, lora_->count, "lora.grads");
  std::memset(lora_->params.data(), 0, lora_->count * sizeof(float));
  std::memset(lora_->grads.data(), 0, lora_->count * sizeof(float));
}

size_t GptModel::lora_num_params() const { return lora_ ? lora_->count : 0; }
float* GptModel::lora_params() { return lora_ ? lora_->params.data() : nullptr; }
float* GptModel::lora_grads() { return lora_ ? lora_->grads.data() : nullptr; }
const float* GptModel::lora_grads() const { return lora_ ? lora_->grads.data() : nullptr; }
void GptModel::set_lora_dropout_key(uint64_t key) {
  if (lora_) lora_->dropout_key = key;
}

size_t GptModel::nf4_bytes() const {
  size_t b = 0;
  if (!lora_) return 0;
  for (int i : kBlockLinears)
    for (const Nf4Tensor& t : lora_->nf4[i]) b += t.bytes();
  return b;
}

void GptModel::lora_load(int index, const float* full) {
  if (!is_block_linear(index)) {
    std::memcpy(param(index), full, layout_.sizes[index] * sizeof(float));
    return;
  }
  const auto [OC, IC] = linear_shape(index, config_.channels);
  const size_t per = static_cast<size_t>(OC) * static_cast<size_t>(IC);
  for (int l = 0; l < config_.num_layers; ++l) {
    lora_->nf4[index][l] = quantize_nf4(full + per * static_cast<size_t>(l), per, &alloc_);
  }
}

void GptModel::lora_init(uint64_t seed) {
  // As PEFT's LoRA: A ~ U(-1/sqrt(IC), 1/sqrt(IC)) (Kaiming-uniform with a = sqrt(5)), B = 0,
  // so the adapted model starts equal to the base. Its own stream: the base draws are those
  // of the full model.
  Rng rng(seed ^ 0x4c6f5241ull);
  const size_t r = lora_->cfg.rank;
  for (int i : kBlockLinears) {
    if (!lora_->cfg.targets(i)) continue;
    const auto [OC, IC] = linear_shape(i, config_.channels);
    const float bound = 1.0f / std::sqrt(static_cast<float>(IC));
    for (int l = 0; l < config_.num_layers; ++l) {
      float* A = lora_->params.data() + lora_->a_off[i] + lora_->stride[i] * l;
      for (size_t j = 0; j < r * IC; ++j) A[j] = bound * static_cast<float>(2 * rng.uniform() - 1);
      std::memset(A + r * IC, 0, static_cast<size_t>(OC) * r * sizeof(float));
    }
  }
}

std::vector<float> GptModel::lora_merged_params() const {
  // W' = W (as dequantized) + (alpha / r) B A per layer; every other tensor as held.
  std::vector<float> full(full_layout_.total);
  const size_t r = lora_->cfg.rank;
  for (int i = 0; i < kNumParamTensors; ++i) {
    float* dst = full.data() + full_layout_.offsets[i];
    if (!is_block_linear(i)) {
      std::memcpy(dst, params_.data() + layout_.offsets[i], layout_.sizes[i] * sizeof(float));
      continue;
    }
    const auto [OC, IC] = linear_shape(i, config_.channels);
    const size_t per = static_cast<size_t>(OC) * static_cast<size_t>(IC);
    for (int l = 0; l < config_.num_layers; ++l) {
      float* w = dst + per * static_cast<size_t>(l);
      dequantize_nf4(lora_->nf4[i][l], 0, per, w);
      if (!lora_->cfg.targets(i)) continue;
      const float* A = lora_->params.data() + lora_->a_off[i] + lora_->stride[i] * l;
      const float* B = A + r * IC;
      std::vector<float> bs(static_cast<size_t>(OC) * r);  // scale * B (OC, r)
      for (size_t j = 0; j < bs.size(); ++j) bs[j] = lora_->cfg.scale() * B[j];
      // (OC, IC) += (scale B) (OC, r) A (r, IC)
      ops::sgemm(false, false, OC, IC, static_cast<int>(r), bs.data(), static_cast<int>(r), A, IC,
                 1.0f, w, IC);
    }
  }
  return full;
}

void GptModel::linear_forward(int index, int l, float* out, const float* inp, const float* bias,
                              int N, int IC, int OC) {
  if (!lora_) {
    gemm_.forward(out, inp, bparam(index, l), lp_weight(index, l), bias, N, IC, OC,
                  options_.precision);
    return;
  }
  LoraState& s = *lora_;
  const bool adapter = s.cfg.targets(index);
  const LoraShape shape =
      shape_of(s.cfg, index, s.training, N, IC, OC, options_.precision == Precision::kBf16);
  const float* A = adapter ? s.params.data() + s.a_off[index] + s.stride[index] * l : nullptr;
  const float* B = adapter ? A + static_cast<size_t>(s.cfg.rank) * IC : nullptr;
  float* h = nullptr;
  if (adapter) {
    const size_t rows = static_cast<size_t>(N);
    if (s.h.empty() || s.h_rows != rows) {
      s.h.clear();
      s.h.resize(static_cast<size_t>(config_.num_layers) * kNumParamTensors);
      s.h_rows = rows;
    }
    Buffer<float>& hb = s.h[static_cast<size_t>(l) * kNumParamTensors + index];
    if (!hb.data()) hb = Buffer<float>(alloc_, rows * s.cfg.rank, "lora.h");
    h = hb.data();
  }
  const Buffer<uint8_t> keep = keep_mask(alloc_, shape, s.dropout_key, l, index);
  Buffer<float> ws(alloc_, lora_workspace_floats(shape, keep.data() != nullptr), "lora.ws");
  lora_linear_forward(out, h, inp, s.nf4[index][l], bias, A, B, keep.data(), shape, ws.data(),
                      &gemm_);
}

void GptModel::linear_backward(int index, int l, float* dinp, float* dweight, float* dbias,
                               const float* dout, const float* inp, int N, int IC, int OC,
                               bool acc) {
  if (!lora_) {
    gemm_.backward(dinp, dweight, dbias, dout, inp, bparam(index, l), lp_weight(index, l), N, IC,
                   OC, acc, options_.precision);
    return;
  }
  LoraState& s = *lora_;
  const bool adapter = s.cfg.targets(index);
  const LoraShape shape =
      shape_of(s.cfg, index, s.training, N, IC, OC, options_.precision == Precision::kBf16);
  float* A = adapter ? s.params.data() + s.a_off[index] + s.stride[index] * l : nullptr;
  float* dA = adapter ? s.grads.data() + s.a_off[index] + s.stride[index] * l : nullptr;
  const size_t r_ic = static_cast<size_t>(shape.rank) * IC;
  const float* h =
      adapter ? s.h[static_cast<size_t>(l) * kNumParamTensors + index].data() : nullptr;
  const Buffer<uint8_t> keep = keep_mask(alloc_, shape, s.dropout_key, l, index);
  Buffer<float> ws(alloc_, lora_workspace_floats(shape, keep.data() != nullptr), "lora.ws");
  lora_linear_backward(dinp, dA, adapter ? dA + r_ic : nullptr, dout, inp, h, s.nf4[index][l], A,
                       adapter ? A + r_ic : nullptr, keep.data(), shape, ws.data(), &gemm_);
}

void lora_dropout_mask(uint8_t* keep, size_t n, float p, uint64_t key) {
  // Counter-based: element i keeps when a hash of (key, i) clears p, so the same key redraws
  // the same mask (a recomputed block) without storing it.
  const uint64_t base = mix64(key + 0x9e3779b97f4a7c15ull);
  const uint64_t threshold = static_cast<uint64_t>(static_cast<double>(p) * 16777216.0);
  for (size_t i = 0; i < n; ++i) keep[i] = (mix64(base + i) >> 40) >= threshold;
}

}  // namespace ft::trainer
