// gpt_config.h: GPT-2 model shape and the flat parameter layout (identical to llm.c's).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ft::trainer {

struct GptConfig {
  int max_seq_len = 256;   // T_max: rows of wpe
  int vocab_size = 256;    // V: real vocabulary
  int padded_vocab = 256;  // Vp >= V: rows of wte (padding rows are never targets)
  int num_layers = 4;      // L
  int num_heads = 4;       // NH
  int channels = 256;      // C
  // Vp rounded up to a multiple of 64 (kept for llm.c compatibility when read from a file).
  static int pad_vocab(int V) { return (V + 63) / 64 * 64; }
  void validate() const;  // throws ConfigError
  std::string describe() const;
};

// The 16 parameter tensors in llm.c order.
enum ParamIndex : int {
  kWte = 0,   // (Vp, C)
  kWpe,       // (maxT, C)
  kLn1w,      // (L, C)
  kLn1b,      // (L, C)
  kQkvw,      // (L, 3C, C)
  kQkvb,      // (L, 3C)
  kAttprojw,  // (L, C, C)
  kAttprojb,  // (L, C)
  kLn2w,      // (L, C)
  kLn2b,      // (L, C)
  kFcw,       // (L, 4C, C)
  kFcb,       // (L, 4C)
  kFcprojw,   // (L, C, 4C)
  kFcprojb,   // (L, C)
  kLnfw,      // (C)
  kLnfb,      // (C)
  kNumParamTensors
};

struct ParamLayout {
  std::array<size_t, kNumParamTensors> sizes{};    // elements per tensor
  std::array<size_t, kNumParamTensors> offsets{};  // element offset in the flat buffer
  size_t total = 0;
  static ParamLayout make(const GptConfig& c);
  // Whether tensor `index` has one slice per block (the 12 block tensors; not wte, wpe, lnf).
  static bool per_block(int index);
  // This layout with the tensors `drop(index)` names at size 0, the offsets recomputed (a model
  // that holds them elsewhere: QLoRA's NF4 linears, ZeRO-3's gathered blocks).
  template <typename Pred>
  ParamLayout without(Pred drop) const {
    ParamLayout p = *this;
    size_t off = 0;
    for (int i = 0; i < kNumParamTensors; ++i) {
      if (drop(i)) p.sizes[i] = 0;
      p.offsets[i] = off;
      off += p.sizes[i];
    }
    p.total = off;
    return p;
  }
  // Whether AdamW weight decay applies (matrices only; not biases or LayerNorm).
  static bool decays(int index);
  static const char* name(int index);
};

// Parameters N for MFU: counts the tied embedding (real V rows) once, so the
// LM-head GEMM is counted, and the position embedding.
size_t count_params_for_flops(const GptConfig& c);
// Training flops per token: 6N + 12 L C T; 4N + 12 L C T without weight gradients (QLoRA's
// frozen base: forward and input gradients only; the adapters' flops are not counted).
double flops_per_token(const GptConfig& c, int T, bool weight_grads = true);

}  // namespace ft::trainer
