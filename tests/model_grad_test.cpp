// model_grad_test.cpp: whole-model gradients against a double-precision reference, and precision/recompute/accumulation equivalences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "ft/core/allocator.h"
#include "ft/core/rng.h"
#include "ft/trainer/model.h"
#include "ft/trainer/ops.h"
#include "reference/gpt_ref.h"

namespace ft::trainer {
namespace {

GptConfig tiny_config() {
  GptConfig g;
  g.vocab_size = 60;  // padded to 64: the padding rows must get zero gradient
  g.padded_vocab = 64;
  g.channels = 16;
  g.num_heads = 2;
  g.num_layers = 2;
  g.max_seq_len = 8;
  return g;
}

// Random, non-trivial parameters: LayerNorm weights away from 1, biases non-zero.
void randomize(GptModel& m, uint64_t seed) {
  m.init_weights(seed);
  Rng rng(seed + 1);
  const ParamLayout& lay = m.layout();
  for (int i = 0; i < kNumParamTensors; ++i) {
    float* p = m.param(i);
    size_t n = lay.sizes[i];
    if (i == kWte) n = static_cast<size_t>(m.config().vocab_size) * m.config().channels;
    const double amp = (i == kLn1w || i == kLn2w || i == kLnfw) ? 0.2 : 0.05;
    const bool matrix = i == kWte || i == kWpe || i == kQkvw || i == kAttprojw || i == kFcw || i == kFcprojw;
    const double s = matrix ? 0.1 : amp;  // larger weights make the test more sensitive
    for (size_t j = 0; j < n; ++j) p[j] += static_cast<float>(rng.normal() * s);
  }
  m.refresh_low_precision();
}

void make_batch(std::vector<int32_t>& in, std::vector<int32_t>& tg, int B, int T, int V, uint64_t seed) {
  Rng rng(seed);
  in.resize(static_cast<size_t>(B) * T);
  tg.resize(in.size());
  for (auto& x : in) x = static_cast<int32_t>(rng.next_u64() % V);
  for (auto& x : tg) x = static_cast<int32_t>(rng.next_u64() % V);
}

// Per-tensor max |a - b| / max |b|, printed.
double compare_grads(const GptModel& m, const std::vector<double>& ref, const float* got,
                     const char* what) {
  const ParamLayout& lay = m.layout();
  double worst = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    double maxdiff = 0, maxref = 0;
    for (size_t j = 0; j < lay.sizes[i]; ++j) {
      const size_t k = lay.offsets[i] + j;
      maxdiff = std::max(maxdiff, std::fabs(got[k] - ref[k]));
      maxref = std::max(maxref, std::fabs(ref[k]));
    }
    const double rel = maxdiff / std::max(maxref, 1e-6);
    std::printf("  [%s] %-9s max|diff| %.3e  max|ref| %.3e  rel %.3e\n", what, ParamLayout::name(i),
                maxdiff, maxref, rel);
    worst = std::max(worst, rel);
  }
  return worst;
}

void check_against_double(AttentionImpl attn, Checkpointing ckpt, size_t head_chunk_bytes = 0) {
  const GptConfig g = tiny_config();
  const int B = 2, T = 8;
  CachingAllocator alloc;
  GptModel m(g, alloc, {Precision::kFp32, ckpt, attn, {}});
  if (head_chunk_bytes) m.set_head_chunk_bytes(head_chunk_bytes);
  randomize(m, 7);
  std::vector<int32_t> in, tg;
  make_batch(in, tg, B, T, g.vocab_size, 11);
  const double loss = m.forward_backward(in.data(), tg.data(), B, T, 1.0f / (B * T), true);

  std::vector<double> p(m.params(), m.params() + m.num_params());
  const double ref_loss = test::ref_gpt_loss(g, p, in.data(), tg.data(), B, T);
  std::printf("loss float %.9f  double %.9f\n", loss, ref_loss);
  EXPECT_NEAR(loss, ref_loss, 1e-5);

  // Central finite differences of the double reference, h = 1e-5: truncation
  // error O(h^2) ~ 1e-10, round-off ~ 1e-16/h ~ 1e-11.
  std::vector<double> fd(p.size(), 0.0);
  const double h = 1e-5;
  for (size_t k = 0; k < p.size(); ++k) {
    const double saved = p[k];
    p[k] = saved + h;
    const double lp = test::ref_gpt_loss(g, p, in.data(), tg.data(), B, T);
    p[k] = saved - h;
    const double lm = test::ref_gpt_loss(g, p, in.data(), tg.data(), B, T);
    p[k] = saved;
    fd[k] = (lp - lm) / (2 * h);
  }
  // Tolerance: float32 forward/backward against double, 1e-3 of each tensor's largest gradient.
  const double worst = compare_grads(m, fd, m.grads(), "fp32 vs double FD");
  std::printf("worst per-tensor relative error %.3e (tolerance 1e-3)\n", worst);
  EXPECT_LT(worst, 1e-3);
  // Padding rows of the tied embedding never receive gradient.
  const float* gw = m.grad(kWte);
  for (size_t j = static_cast<size_t>(g.vocab_size) * g.channels; j < static_cast<size_t>(g.padded_vocab) * g.channels; ++j) {
    ASSERT_EQ(gw[j], 0.0f) << "padding row gradient at " << j;
  }
}

TEST(ModelGrad, FlashAttentionMatchesDoubleReference) {
  check_against_double(AttentionImpl::kFlash, Checkpointing::kNone);
}

TEST(ModelGrad, MaterializedAttentionMatchesDoubleReference) {
  check_against_double(AttentionImpl::kMaterialized, Checkpointing::kNone);
}

TEST(ModelGrad, ChunkedLmHeadMatchesDoubleReference) {
  // 5 rows of logits per chunk: 16 rows make 4 chunks, the last one partial.
  check_against_double(AttentionImpl::kFlash, Checkpointing::kNone, 5 * 64 * sizeof(float));
}

TEST(ModelGrad, BlockCheckpointMatchesDoubleReference) {
  check_against_double(AttentionImpl::kFlash, Checkpointing::kBlock);
}

GptConfig small_config() {
  GptConfig g;
  g.vocab_size = 256;
  g.padded_vocab = 256;
  g.channels = 64;
  g.num_heads = 4;
  g.num_layers = 3;
  g.max_seq_len = 32;
  return g;
}

std::vector<float> grads_for(const ModelOptions& o, const std::vector<int32_t>& in,
                             const std::vector<int32_t>& tg, int B, int T, double* loss_out,
                             float dloss_scale = 1.0f) {
  CachingAllocator alloc;
  GptModel m(small_config(), alloc, o);
  randomize(m, 3);
  *loss_out = m.forward_backward(in.data(), tg.data(), B, T, dloss_scale / (B * T), true);
  return std::vector<float>(m.grads(), m.grads() + m.num_params());
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double md = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    md = std::max(md, static_cast<double>(std::fabs(a[i] - b[i])));
    mb = std::max(mb, static_cast<double>(std::fabs(b[i])));
  }
  return md / std::max(mb, 1e-12);
}

TEST(ModelGrad, BlockCheckpointingGivesIdenticalGradients) {
  const int B = 4, T = 32;
  std::vector<int32_t> in, tg;
  make_batch(in, tg, B, T, 256, 5);
  double l0, l1;
  auto g0 = grads_for({Precision::kFp32, Checkpointing::kNone, AttentionImpl::kFlash, {}}, in, tg, B, T, &l0);
  auto g1 = grads_for({Precision::kFp32, Checkpointing::kBlock, AttentionImpl::kFlash, {}}, in, tg, B, T, &l1);
  const double d = rel_diff(g1, g0);
  std::printf("block vs none: loss %.9f vs %.9f, grad max rel diff %.3e (tolerance: bitwise equal)\n", l1, l0, d);
  EXPECT_EQ(l0, l1);
  EXPECT_EQ(d, 0.0);
}

TEST(ModelGrad, LowPrecisionWithinToleranceOfFp32) {
  const int B = 4, T = 32;
  std::vector<int32_t> in, tg;
  make_batch(in, tg, B, T, 256, 6);
  double l32, l16b, l16;
  auto g32 = grads_for({Precision::kFp32, Checkpointing::kNone, AttentionImpl::kFlash, {}}, in, tg, B, T, &l32);
  auto gbf = grads_for({Precision::kBf16, Checkpointing::kNone, AttentionImpl::kFlash, {}}, in, tg, B, T, &l16b);
  // fp16 runs with a loss scale of 1024 (as the scaler would), then unscales.
  auto gfp = grads_for({Precision::kFp16, Checkpointing::kNone, AttentionImpl::kFlash, {}}, in, tg, B, T, &l16, 1024.0f);
  for (auto& x : gfp) x /= 1024.0f;
  const double dbf = rel_diff(gbf, g32), dfp = rel_diff(gfp, g32);
  std::printf("loss fp32 %.6f bf16 %.6f fp16 %.6f\n", l32, l16b, l16);
  std::printf("grad max rel diff vs fp32: bf16 %.3e (tolerance 5e-2), fp16 %.3e (tolerance 1e-2)\n", dbf, dfp);
  // bf16 keeps 8 mantissa bits (relative rounding 2^-9 = 2e-3 per operand).
  EXPECT_NEAR(l16b, l32, 2e-2);
  EXPECT_LT(dbf, 5e-2);
  // fp16 keeps 11 bits (2^-12 = 2.4e-4 per operand).
  EXPECT_NEAR(l16, l32, 3e-3);
  EXPECT_LT(dfp, 1e-2);
}

TEST(ModelGrad, Fp16OverflowYieldsNonFiniteGradients) {
  const int B = 2, T = 16;
  std::vector<int32_t> in, tg;
  make_batch(in, tg, B, T, 256, 8);
  double l;
  // A loss scale of 2^30 pushes the scaled gradients past fp16's 65504.
  auto g16 = grads_for({Precision::kFp16, Checkpointing::kNone, AttentionImpl::kFlash, {}}, in, tg, B, T, &l, 1073741824.0f);
  auto g32 = grads_for({Precision::kFp32, Checkpointing::kNone, AttentionImpl::kFlash, {}}, in, tg, B, T, &l, 1073741824.0f);
  EXPECT_TRUE(ops::has_nonfinite(g16.data(), g16.size()));
  EXPECT_FALSE(ops::has_nonfinite(g32.data(), g32.size()));
}

TEST(ModelGrad, AccumulatedMicroBatchesEqualOneLargeBatch) {
  const int B = 4, T = 32, K = 2;
  std::vector<int32_t> in, tg;
  make_batch(in, tg, B * K, T, 256, 9);
  CachingAllocator alloc;
  const ModelOptions o{Precision::kFp32, Checkpointing::kNone, AttentionImpl::kFlash, {}};
  GptModel big(small_config(), alloc, o), acc(small_config(), alloc, o);
  randomize(big, 4);
  randomize(acc, 4);
  const double lb = big.forward_backward(in.data(), tg.data(), B * K, T, 1.0f / (B * K * T), true);
  double la = 0;
  for (int k = 0; k < K; ++k) {
    const size_t off = static_cast<size_t>(k) * B * T;
    la += acc.forward_backward(in.data() + off, tg.data() + off, B, T, 1.0f / (B * K * T), k == 0) / K;
  }
  std::vector<float> gb(big.grads(), big.grads() + big.num_params());
  std::vector<float> ga(acc.grads(), acc.grads() + acc.num_params());
  const double d = rel_diff(ga, gb);
  std::printf("accumulated vs large batch: loss %.9f vs %.9f, grad max rel diff %.3e (tolerance 1e-5)\n", la, lb, d);
  EXPECT_NEAR(la, lb, 1e-6);
  EXPECT_LT(d, 1e-5);
}

TEST(ModelGrad, ActivationMemoryShrinksWithBlockCheckpointing) {
  CachingAllocator alloc;
  GptModel none(small_config(), alloc, {Precision::kFp32, Checkpointing::kNone, AttentionImpl::kFlash, {}});
  GptModel block(small_config(), alloc, {Precision::kFp32, Checkpointing::kBlock, AttentionImpl::kFlash, {}});
  const auto a = none.activation_memory(8, 32), b = block.activation_memory(8, 32);
  EXPECT_EQ(a.no_checkpoint_bytes, b.no_checkpoint_bytes);
  EXPECT_LT(b.saved_bytes, a.saved_bytes / 3);
  // And measured: peak allocated bytes during forward_backward fall too.
  std::vector<int32_t> in, tg;
  make_batch(in, tg, 8, 32, 256, 10);
  size_t peaks[2];
  int i = 0;
  for (GptModel* m : {&none, &block}) {
    alloc.reset_peak();
    const size_t base = alloc.stats().allocated;
    m->forward_backward(in.data(), tg.data(), 8, 32, 1.0f / 256, true);
    peaks[i++] = alloc.stats().peak_allocated - base;
  }
  std::printf("measured activation peak: none %zu B, block %zu B\n", peaks[0], peaks[1]);
  EXPECT_LT(peaks[1], peaks[0]);
}

}  // namespace
}  // namespace ft::trainer
