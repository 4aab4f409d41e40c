// convergence_test.cpp: a small byte-level GPT on the KJV Bible must beat the best bigram model within a bounded number of steps.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "ft/trainer/data.h"
#include "ft/trainer/trainer.h"

namespace ft::trainer {
namespace {

// Conditional entropy H(x_t | x_{t-1}) in nats of the bigram model fitted on
// `src` itself: the cross-entropy no model that sees one byte of context can
// beat on that text. Validation text is not used to fit it, so this is an
// optimistic bar for a bigram model on validation.
double bigram_entropy(const data::TokenSource& src) {
  std::vector<int32_t> t(src.size());
  src.read(0, t.size(), t.data());
  std::vector<double> pair(256 * 256, 0.0), first(256, 0.0);
  for (size_t i = 1; i < t.size(); ++i) {
    pair[t[i - 1] * 256 + t[i]] += 1;
    first[t[i - 1]] += 1;
  }
  double h = 0;
  const double n = static_cast<double>(t.size() - 1);
  for (int a = 0; a < 256; ++a)
    for (int b = 0; b < 256; ++b) {
      const double c = pair[a * 256 + b];
      if (c > 0) h -= c / n * std::log(c / first[a]);
    }
  return h;
}

TEST(Convergence, KjvByteModelBeatsBigramEntropy) {
  // scripts/test.sh installs bible-kjv; without it the default corpus is missing.
  ASSERT_EQ(std::system("command -v bible >/dev/null 2>&1"), 0)
      << "`bible` (Debian package bible-kjv) is not installed; run scripts/deps.sh";
  TrainConfig c;
  c.model.vocab_size = 256;
  c.model.padded_vocab = 256;
  c.model.num_layers = 2;
  c.model.num_heads = 4;
  c.model.channels = 128;
  c.model.max_seq_len = 64;
  c.seq_len = 64;
  c.micro_batch = 16;
  c.steps = 300;
  c.warmup = 20;
  c.lr = 4e-3f;
  c.min_lr = 4e-4f;
  c.threads = 2;
  c.data = "kjv";
  c.val_batches = 32;
  const auto t0 = std::chrono::steady_clock::now();
  Trainer t(c);
  // The bigram bar is fitted on the training split of the same corpus (the old sequential view).
  const double h2 = bigram_entropy(*data::load_data("kjv", data::ByteTokenizer()).train);
  const double initial_val = t.evaluate();
  while (!t.done()) t.step();
  const double val = t.evaluate();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("KJV bytes: bigram entropy %.4f nats, uniform %.4f; val loss %.4f -> %.4f after %d steps (%.1f s)\n",
              h2, std::log(256.0), initial_val, val, c.steps, secs);
  // The model must use more than one byte of context: beat the bigram entropy.
  EXPECT_LT(val, h2);
}

}  // namespace
}  // namespace ft::trainer
