// model_internal.h: GptModel's private workspaces, shared by model.cpp and model_stage.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "ft/core/allocator.h"
#include "ft/trainer/model.h"
#include "ft/trainer/nf4.h"

namespace ft::trainer {

// Activations one block keeps for its backward pass.
struct GptModel::LayerActs {
  Buffer<float> ln1;       // (B, T, C)
  Buffer<float> ln1_mean;  // (B, T)
  Buffer<float> ln1_rstd;  // (B, T)
  // With tensor parallelism of degree t, Cl = C/t and NHl = NH/t (this rank's heads);
  // otherwise Cl = C and NHl = NH.
  Buffer<float> qkv;       // (B, T, 3Cl)
  Buffer<float> atty;      // (B, T, Cl)
  Buffer<float> att;       // (B, NHl, T, T) materialised probs, or (B, NHl, T) lse for flash
  Buffer<float> res2;      // (B, T, C) residual after attention
  Buffer<float> ln2;       // (B, T, C)
  Buffer<float> ln2_mean;  // (B, T)
  Buffer<float> ln2_rstd;  // (B, T)
  Buffer<float> fch;       // (B, T, 4Cl) pre-GELU
  Buffer<float> fch_gelu;  // (B, T, 4Cl)

  static size_t bytes(int B, int T, int C, int Cl, int NHl, AttentionImpl attn) {
    const size_t BT = static_cast<size_t>(B) * T;
    const size_t att = attn == AttentionImpl::kFlash ? static_cast<size_t>(B) * NHl * T
                                                     : static_cast<size_t>(B) * NHl * T * T;
    return sizeof(float) * (BT * C * 4 + BT * Cl + BT * 3 * Cl + BT * 4 * Cl * 2 + BT * 4 + att);
  }
  void allocate(CachingAllocator& a, int B, int T, int C, int Cl, int NHl, AttentionImpl attn) {
    const size_t BT = static_cast<size_t>(B) * T;
    ln1 = Buffer<float>(a, BT * C, "act.ln1");
    ln1_mean = Buffer<float>(a, BT, "act.ln1_mean");
    ln1_rstd = Buffer<float>(a, BT, "act.ln1_rstd");
    qkv = Buffer<float>(a, BT * 3 * Cl, "act.qkv");
    atty = Buffer<float>(a, BT * Cl, "act.atty");
    att = attn == AttentionImpl::kFlash
              ? Buffer<float>(a, static_cast<size_t>(B) * NHl * T, "act.lse")
              : Buffer<float>(a, static_cast<size_t>(B) * NHl * T * T, "act.att");
    res2 = Buffer<float>(a, BT * C, "act.res2");
    ln2 = Buffer<float>(a, BT * C, "act.ln2");
    ln2_mean = Buffer<float>(a, BT, "act.ln2_mean");
    ln2_rstd = Buffer<float>(a, BT, "act.ln2_rstd");
    fch = Buffer<float>(a, BT * 4 * Cl, "act.fch");
    fch_gelu = Buffer<float>(a, BT * 4 * Cl, "act.fch_gelu");
  }
};

// Everything one micro-batch needs between forward and backward.
struct GptModel::Workspace {
  std::vector<Buffer<float>> xs;  // L+1 of (B, T, C): the residual stream at each block input
  std::vector<LayerActs> acts;    // L (checkpointing none) or 1 (block recompute / eval)
  Buffer<float> lnf;              // (B, T, C)
  Buffer<float> lnf_mean;         // (B, T)
  Buffer<float> lnf_rstd;         // (B, T)
  Buffer<float> logits;           // (B, T, Vp); becomes dlogits in backward (fp32/fp16)
  Buffer<uint16_t> logits_bf16;   // (B, T, Vp) bf16 bits instead, in bf16 mode
  Buffer<float> losses;           // (B, T)
};

// One micro-batch in flight on a pipeline stage: its activations from forward to backward.
struct GptModel::StageSlot {
  Workspace w;  // xs: local blocks + 1 of (B, T, C); acts: local blocks (none) or empty (block)
  Buffer<int32_t> tokens;   // (B, T) first stage: the inputs, for the embedding backward
  Buffer<int32_t> targets;  // (B, T) last stage: the targets, for the loss in backward
  bool busy = false;        // forward done, backward not yet
};

// What the stage-wise forward/backward keep across micro-batches and steps.
struct GptModel::StageState {
  int B = 0, T = 0;
  ModelOptions options;  // the options the buffers were sized for
  std::vector<StageSlot> slots;
  LayerActs shared_acts;  // block recompute: one set of block activations for all slots
  int shared_owner = -1;  // slot whose last block's activations shared_acts still hold
  Buffer<float> grad;     // (B, T, C) gradient of the residual stream (in: output, out: input)
  Buffer<float> dlnf;     // (B, T, C) last stage: gradient of the final LayerNorm output
};

// What QLoRA adds to the model.
struct GptModel::LoraState {
  LoraConfig cfg;
  std::array<std::vector<Nf4Tensor>, kNumParamTensors> nf4;  // [block linear][layer]
  // Per targeted linear: offset of layer 0's A in the adapter buffer; layer l's A is at
  // a_off + l * stride, its B right after A.
  std::array<size_t, kNumParamTensors> a_off{}, stride{};
  size_t count = 0;
  Buffer<float> params, grads;  // (count)
  // Adapter activations h = drop(x) A^T (N, r) per layer and linear, for the backward.
  std::vector<Buffer<float>> h;  // [l * kNumParamTensors + index]
  size_t h_rows = 0;
  uint64_t dropout_key = 0;
  bool training = false;  // dropout applies only in a training forward
};

}  // namespace ft::trainer
