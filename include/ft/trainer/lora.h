// lora.h: QLoRA fine-tuning settings: which block linears carry a low-rank adapter, its rank,
// scale and dropout. With a rank > 0 the model keeps every block linear in NF4, frozen.
#pragma once

#include <string>

namespace ft::trainer {

struct LoraConfig {
  int rank = 0;       // r; 0: off (the model trains all its weights)
  float alpha = 16;   // the adapter's output is scaled by alpha / r
  float dropout = 0;  // p of dropout on the adapter's input
  bool attn = true;   // adapters on the QKV and attention-projection linears
  bool mlp = true;    // adapters on both MLP linears
  bool enabled() const { return rank > 0; }
  float scale() const { return rank > 0 ? alpha / static_cast<float>(rank) : 0.0f; }
  // Whether the block linear `index` (a ParamIndex) carries an adapter.
  bool targets(int index) const;
  // "attn,mlp" style: a comma list of attn | mlp.
  std::string targets_text() const;
};

// Parses --lora-targets ("attn", "mlp", "attn,mlp") into cfg; ConfigError on anything else.
void parse_lora_targets(const std::string& text, LoraConfig& cfg);

}  // namespace ft::trainer
