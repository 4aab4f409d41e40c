// model_stage.cpp: a pipeline stage of the GPT: its blocks, layout and micro-batch fwd/bwd.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "ft/core/annotate.h"
#include "ft/core/error.h"
#include "ft/trainer/model.h"
#include "ft/trainer/ops.h"
#include "model_internal.h"

namespace ft::trainer {

ModelSharding resolve_stage(const GptConfig& config, ModelSharding s) {
  const int L = config.num_layers;
  if (s.num_layers < 0) s.num_layers = L - s.first_layer;
  if (s.first_layer < 0 || s.num_layers < 1 || s.first_layer + s.num_layers > L) {
    throw ConfigError(fmt::format(
        "pipeline stage with blocks [{}, {}) does not fit a model of {} layers (a stage needs at "
        "least one block)",
        s.first_layer, s.first_layer + s.num_layers, L));
  }
  return s;
}

ParamLayout make_stage_layout(const GptConfig& config, const ModelSharding& s) {
  GptConfig local = config;
  local.num_layers = s.num_layers;
  ParamLayout p = ParamLayout::make(local);
  // The tied wte is the embedding (first stage) and the LM head (last stage).
  if (!s.has_embedding && !s.has_head) p.sizes[kWte] = 0;
  if (!s.has_embedding) p.sizes[kWpe] = 0;
  if (!s.has_head) p.sizes[kLnfw] = p.sizes[kLnfb] = 0;
  size_t off = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    p.offsets[i] = off;
    off += p.sizes[i];
  }
  p.total = off;
  return p;
}

size_t GptModel::stage_slice_offset(int index) const {
  if (index == kWte || index == kWpe || index == kLnfw || index == kLnfb) return 0;
  // (L, ...) tensors: the stage's blocks are contiguous, per-block size unchanged.
  // full_layout_: the stage's unsharded layout (tensor parallelism shards it further).
  return full_layout_.sizes[index] / static_cast<size_t>(local_layers()) *
         static_cast<size_t>(first_layer());
}

void GptModel::stage_prepare(int slots, int B, int T) {
  if (slots < 1 || B < 1 || T < 1) {
    throw ConfigError(fmt::format("stage_prepare: slots {} B {} T {} must be >= 1", slots, B, T));
  }
  if (T > config_.max_seq_len) {
    throw ConfigError(
        fmt::format("sequence length {} exceeds the model's maximum {}", T, config_.max_seq_len));
  }
  if (!stage_) stage_ = std::make_unique<StageState>();
  StageState& st = *stage_;
  for (const StageSlot& s : st.slots) {
    if (s.busy)
      throw Error("stage_prepare: a micro-batch is still in flight (forward without backward)");
  }
  const int C = config_.channels, NH = config_.num_heads, L = local_layers();
  const size_t BT = static_cast<size_t>(B) * T;
  const bool per_layer = options_.checkpointing == Checkpointing::kNone;
  const bool same = st.B == B && st.T == T && st.options.checkpointing == options_.checkpointing &&
                    st.options.attention == options_.attention;
  if (!same) {
    // New shapes or options: drop every buffer (the caching allocator keeps the memory).
    st.slots.clear();
    st.shared_acts = LayerActs{};
    st.B = B;
    st.T = T;
    st.options = options_;
    st.grad = Buffer<float>(alloc_, BT * C, "grad.stage");
    st.dlnf = sharding_.has_head ? Buffer<float>(alloc_, BT * C, "grad.dlnf") : Buffer<float>();
    if (!per_layer) st.shared_acts.allocate(alloc_, B, T, C, C / tp_, NH / tp_, options_.attention);
  }
  st.shared_owner = -1;
  while (static_cast<int>(st.slots.size()) < slots) {
    StageSlot s;
    for (int i = 0; i <= L; ++i) s.w.xs.emplace_back(alloc_, BT * C, "act.residual");
    if (per_layer) {
      s.w.acts.resize(static_cast<size_t>(L));
      for (auto& a : s.w.acts) a.allocate(alloc_, B, T, C, C / tp_, NH / tp_, options_.attention);
    }
    if (sharding_.has_embedding) s.tokens = Buffer<int32_t>(alloc_, BT, "act.tokens");
    if (sharding_.has_head) {
      s.targets = Buffer<int32_t>(alloc_, BT, "act.targets");
      s.w.lnf = Buffer<float>(alloc_, BT * C, "act.lnf");
      s.w.lnf_mean = Buffer<float>(alloc_, BT, "act.lnf_mean");
      s.w.lnf_rstd = Buffer<float>(alloc_, BT, "act.lnf_rstd");
      s.w.losses = Buffer<float>(alloc_, BT, "act.losses");
    }
    st.slots.push_back(std::move(s));
  }
}

GptModel::StageSlot& GptModel::stage_slot(int slot, const char* what) {
  if (!stage_ || slot < 0 || slot >= static_cast<int>(stage_->slots.size())) {
    throw Error(fmt::format("{}: slot {} was not prepared ({} slots; call stage_prepare)", what,
                            slot, stage_ ? stage_->slots.size() : 0));
  }
  return stage_->slots[static_cast<size_t>(slot)];
}

float* GptModel::stage_input(int slot) { return stage_slot(slot, "stage_input").w.xs[0].data(); }

const float* GptModel::stage_output(int slot) const {
  if (!stage_ || slot < 0 || slot >= static_cast<int>(stage_->slots.size())) {
    throw Error(fmt::format("stage_output: slot {} was not prepared", slot));
  }
  return stage_->slots[static_cast<size_t>(slot)].w.xs[static_cast<size_t>(local_layers())].data();
}

float* GptModel::stage_grad() {
  if (!stage_) throw Error("stage_grad: call stage_prepare first");
  return stage_->grad.data();
}

void GptModel::stage_forward(int slot, const int32_t* tokens, const int32_t* targets) {
  StageSlot& s = stage_slot(slot, "stage_forward");
  StageState& st = *stage_;
  if (s.busy) throw Error(fmt::format("stage_forward: slot {} still holds a micro-batch", slot));
  const int B = st.B, T = st.T, C = config_.channels, L = local_layers();
  const size_t N = static_cast<size_t>(B) * T;
  if (sharding_.has_embedding) {
    if (!tokens) throw Error("stage_forward: the first stage needs the input tokens");
    std::memcpy(s.tokens.data(), tokens, N * sizeof(int32_t));
    FT_RANGE("fwd.encoder", RangeKind::kCompute);
    ops::encoder_forward(s.w.xs[0].data(), s.tokens.data(), param(kWte), param(kWpe), B, T, C);
  }
  const bool per_layer = options_.checkpointing == Checkpointing::kNone;
  for (int l = 0; l < L; ++l) {
    layer_forward(l, s.w.xs[static_cast<size_t>(l)].data(),
                  s.w.xs[static_cast<size_t>(l) + 1].data(),
                  per_layer ? s.w.acts[static_cast<size_t>(l)] : st.shared_acts, B, T);
  }
  if (!per_layer) st.shared_owner = slot;
  if (sharding_.has_head) {
    if (!targets) throw Error("stage_forward: the last stage needs the targets");
    std::memcpy(s.targets.data(), targets, N * sizeof(int32_t));
    FT_RANGE("fwd.head", RangeKind::kCompute);
    ops::layernorm_forward(s.w.lnf.data(), s.w.lnf_mean.data(), s.w.lnf_rstd.data(),
                           s.w.xs[static_cast<size_t>(L)].data(), param(kLnfw), param(kLnfb),
                           static_cast<int>(N), C);
  }
  s.busy = true;
}

double GptModel::stage_backward(int slot, float dloss_per_token, bool first_micro) {
  StageSlot& s = stage_slot(slot, "stage_backward");
  StageState& st = *stage_;
  if (!s.busy) throw Error(fmt::format("stage_backward: slot {} has no forward", slot));
  const int B = st.B, T = st.T, C = config_.channels, L = local_layers(), N = B * T;
  const size_t BT = static_cast<size_t>(N);
  if (first_micro) {
    // As forward_backward: accumulated-only gradients start from zero. The
    // embedding-only stage's wte gradient is accumulated too (no head overwrites it).
    for (int i :
         {kWpe, kLn1w, kLn1b, kQkvb, kAttprojb, kLn2w, kLn2b, kFcb, kFcprojb, kLnfw, kLnfb}) {
      std::memset(grad(i), 0, layout_.sizes[i] * sizeof(float));
    }
    if (!sharding_.has_head) std::memset(grad(kWte), 0, layout_.sizes[kWte] * sizeof(float));
  }
  float* dres = st.grad.data();  // in: gradient of the output (or zero); out: of the input
  double loss_sum = 0;
  if (sharding_.has_head) {
    const int rows = head_chunk_rows(N);
    allocate_head(s.w, rows);
    for (int r0 = 0; r0 < N; r0 += rows) {
      loss_sum += head_chunk(s.w, s.targets.data(), r0, std::min(rows, N - r0), dloss_per_token,
                             st.dlnf.data(), first_micro && r0 == 0);
    }
    s.w.logits.reset();
    s.w.logits_bf16.reset();
    FT_RANGE("bwd.lnf", RangeKind::kCompute);
    std::memset(dres, 0, BT * C * sizeof(float));
    ops::layernorm_backward(dres, grad(kLnfw), grad(kLnfb), st.dlnf.data(),
                            s.w.xs[static_cast<size_t>(L)].data(), param(kLnfw),
                            s.w.lnf_mean.data(), s.w.lnf_rstd.data(), N, C);
  }
  const bool recompute = options_.checkpointing == Checkpointing::kBlock;
  for (int l = L - 1; l >= 0; --l) {
    LayerActs& a = recompute ? st.shared_acts : s.w.acts[static_cast<size_t>(l)];
    const float* x = s.w.xs[static_cast<size_t>(l)].data();
    // The shared set still holds this slot's last block only when no other
    // micro-batch ran forward in between (always so on the last stage).
    if (recompute && !(l == L - 1 && st.shared_owner == slot)) {
      FT_RANGE("recompute.block", RangeKind::kCompute, l);
      Buffer<float> scratch(alloc_, BT * C, "act.recompute_out");
      layer_forward(l, x, scratch.data(), a, B, T);
    }
    if (recompute) st.shared_owner = -1;
    layer_backward(l, x, dres, a, B, T, first_micro);
    if (grad_ready_) grad_ready_(l);
  }
  if (sharding_.has_embedding) {
    FT_RANGE("bwd.encoder", RangeKind::kCompute);
    ops::encoder_backward(grad(kWte), grad(kWpe), dres, s.tokens.data(), B, T, C);
  }
  if (grad_ready_) grad_ready_(-1);
  s.busy = false;
  return sharding_.has_head ? loss_sum / N : 0.0;
}

double GptModel::stage_loss(int slot) {
  StageSlot& s = stage_slot(slot, "stage_loss");
  if (!sharding_.has_head) throw Error("stage_loss: only the last stage computes the loss");
  if (!s.busy) throw Error(fmt::format("stage_loss: slot {} has no forward", slot));
  const int N = stage_->B * stage_->T;
  const int rows = head_chunk_rows(N);
  allocate_head(s.w, rows);
  double sum = 0;
  for (int r0 = 0; r0 < N; r0 += rows) {
    sum += head_chunk(s.w, s.targets.data(), r0, std::min(rows, N - r0), 0.0f, nullptr, false);
  }
  s.w.logits.reset();
  s.w.logits_bf16.reset();
  s.busy = false;
  return sum / N;
}

void GptModel::stage_release(int slot) { stage_slot(slot, "stage_release").busy = false; }

}  // namespace ft::trainer
