// gpt_config.cpp: parameter layout, validation and flop counts for the GPT-2 model.
#include "ft/trainer/gpt_config.h"

#include <fmt/format.h>

#include "ft/core/error.h"

namespace ft::trainer {

void GptConfig::validate() const {
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw ConfigError("invalid model config: " + msg);
  };
  need(max_seq_len > 0, fmt::format("seq-len must be > 0 (got {})", max_seq_len));
  need(vocab_size > 0, fmt::format("vocab must be > 0 (got {})", vocab_size));
  need(padded_vocab >= vocab_size,
       fmt::format("padded vocab {} < vocab {}", padded_vocab, vocab_size));
  need(num_layers > 0, fmt::format("layers must be > 0 (got {})", num_layers));
  need(num_heads > 0, fmt::format("heads must be > 0 (got {})", num_heads));
  need(channels > 0 && channels % num_heads == 0,
       fmt::format("channels ({}) must be a positive multiple of heads ({})", channels,
                   num_heads));
}

std::string GptConfig::describe() const {
  return fmt::format("L{} NH{} C{} V{} (padded {}) Tmax{}", num_layers, num_heads, channels,
                     vocab_size, padded_vocab, max_seq_len);
}

ParamLayout ParamLayout::make(const GptConfig& c) {
  ParamLayout p;
  const size_t Vp = c.padded_vocab, C = c.channels, L = c.num_layers, T = c.max_seq_len;
  p.sizes = {Vp * C,         T * C,     L * C,         L * C, L * 3 * C * C, L * 3 * C,
             L * C * C,      L * C,     L * C,         L * C, L * 4 * C * C, L * 4 * C,
             L * C * 4 * C,  L * C,     C,             C};
  size_t off = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    p.offsets[i] = off;
    off += p.sizes[i];
  }
  p.total = off;
  return p;
}

bool ParamLayout::per_block(int index) {
  return index != kWte && index != kWpe && index != kLnfw && index != kLnfb;
}

bool ParamLayout::decays(int index) {
  return index == kWte || index == kWpe || index == kQkvw || index == kAttprojw ||
         index == kFcw || index == kFcprojw;
}

const char* ParamLayout::name(int index) {
  static const char* kNames[kNumParamTensors] = {
      "wte",  "wpe",  "ln1w", "ln1b", "qkvw", "qkvb",    "attprojw", "attprojb",
      "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw", "fcprojb", "lnfw", "lnfb"};
  return index >= 0 && index < kNumParamTensors ? kNames[index] : "?";
}

size_t count_params_for_flops(const GptConfig& c) {
  ParamLayout p = ParamLayout::make(c);
  // Count the real vocabulary rows of the tied embedding, not the padding.
  return p.total - static_cast<size_t>(c.padded_vocab - c.vocab_size) * c.channels;
}

double flops_per_token(const GptConfig& c, int T, bool weight_grads) {
  return (weight_grads ? 6.0 : 4.0) * static_cast<double>(count_params_for_flops(c)) +
         12.0 * c.num_layers * static_cast<double>(c.channels) * T;
}

}  // namespace ft::trainer
