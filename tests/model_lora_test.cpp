// model_lora_test.cpp: the GPT model under QLoRA: NF4 block linears, adapter gradients against a
// double-precision reference, dropout masks under recompute, merging, and what is not held.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ft/core/allocator.h"
#include "ft/core/error.h"
#include "ft/core/rng.h"
#include "ft/trainer/model.h"
#include "reference/gpt_ref.h"

namespace ft::trainer {
namespace {

GptConfig tiny_config() {
  GptConfig g;
  g.vocab_size = 60;
  g.padded_vocab = 64;
  g.channels = 16;
  g.num_heads = 2;
  g.num_layers = 2;
  g.max_seq_len = 8;
  return g;
}

ModelOptions lora_options(int rank, float alpha, float dropout = 0) {
  ModelOptions o;
  o.lora.rank = rank;
  o.lora.alpha = alpha;
  o.lora.dropout = dropout;
  return o;
}

void make_batch(std::vector<int32_t>& in, std::vector<int32_t>& tg, int B, int T, int V) {
  Rng rng(99);
  in.resize(static_cast<size_t>(B) * T);
  tg.resize(in.size());
  for (auto& x : in) x = static_cast<int32_t>(rng.next_u64() % V);
  for (auto& x : tg) x = static_cast<int32_t>(rng.next_u64() % V);
}

void randomize_adapters(GptModel& m, uint64_t seed) {
  Rng rng(seed);
  for (size_t i = 0; i < m.lora_num_params(); ++i) {
    m.lora_params()[i] = static_cast<float>(0.3 * rng.normal());
  }
}

// A plain fp32 model holding `full` (the llm.c layout).
std::unique_ptr<GptModel> full_model(CachingAllocator& alloc, const std::vector<float>& full) {
  auto m = std::make_unique<GptModel>(tiny_config(), alloc, ModelOptions{});
  const ParamLayout lay = ParamLayout::make(tiny_config());
  for (int i = 0; i < kNumParamTensors; ++i) m->load_full_tensor(i, full.data() + lay.offsets[i]);
  return m;
}

TEST(QloraModel, StartsAsItsDequantizedBaseAndMergesExactly) {
  CachingAllocator alloc;
  GptModel q(tiny_config(), alloc, lora_options(4, 8));
  q.init_weights(7);
  const int B = 2, T = 8;
  std::vector<int32_t> in, tg;
  make_batch(in, tg, B, T, 60);
  // B = 0 at initialisation: the adapted model is the dequantized base.
  auto base = full_model(alloc, q.gather_full_params());
  const double lq = q.forward_loss(in.data(), tg.data(), B, T);
  EXPECT_NEAR(lq, base->forward_loss(in.data(), tg.data(), B, T), 1e-5 * lq);
  // With trained-looking adapters, the merged model (W + alpha/r B A) computes the same loss.
  randomize_adapters(q, 3);
  const double lq2 = q.forward_loss(in.data(), tg.data(), B, T);
  EXPECT_GT(std::fabs(lq2 - lq), 1e-3);  // the adapters do change the function
  auto merged = full_model(alloc, q.gather_full_params());
  EXPECT_NEAR(lq2, merged->forward_loss(in.data(), tg.data(), B, T), 1e-5 * lq2);
}

// Adapter gradients against central differences of the double-precision reference loss on the
// merged weights W_deq + (alpha/r) B A, formed in double. Tolerance: 2e-3 of the largest
// reference gradient of each adapter matrix (fp32 forward/backward against an fp64 loss).
TEST(QloraModel, AdapterGradientsMatchDoubleReference) {
  CachingAllocator alloc;
  const int rank = 4;
  const float alpha = 8;
  GptModel q(tiny_config(), alloc, lora_options(rank, alpha));
  q.init_weights(11);
  const std::vector<float> deq = q.gather_full_params();  // B = 0: exactly the NF4 weights
  randomize_adapters(q, 5);
  const int B = 2, T = 8;
  std::vector<int32_t> in, tg;
  make_batch(in, tg, B, T, 60);
  q.forward_backward(in.data(), tg.data(), B, T, 1.0f / (B * T), true);
  const std::vector<float> got(q.lora_grads(), q.lora_grads() + q.lora_num_params());

  const GptConfig g = tiny_config();
  const ParamLayout lay = ParamLayout::make(g);
  const int C = g.channels, L = g.num_layers;
  std::vector<double> ad(q.lora_params(), q.lora_params() + q.lora_num_params());
  // Merged double weights from the double adapters (same order as the model: per linear in
  // ParamIndex order, per layer, A (r, IC) then B (OC, r)).
  struct Lin {
    int index, OC, IC;
  };
  const Lin lins[] = {{kQkvw, 3 * C, C}, {kAttprojw, C, C}, {kFcw, 4 * C, C}, {kFcprojw, C, 4 * C}};
  auto loss = [&](const std::vector<double>& a) {
    std::vector<double> p(deq.begin(), deq.end());
    size_t off = 0;
    for (const Lin& li : lins) {
      for (int l = 0; l < L; ++l) {
        const double* A = a.data() + off;
        const double* Bm = A + static_cast<size_t>(rank) * li.IC;
        double* W = p.data() + lay.offsets[li.index] + static_cast<size_t>(l) * li.OC * li.IC;
        for (int o = 0; o < li.OC; ++o)
          for (int i = 0; i < li.IC; ++i) {
            double s = 0;
            for (int k = 0; k < rank; ++k) s += Bm[o * rank + k] * A[k * li.IC + i];
            W[static_cast<size_t>(o) * li.IC + i] += alpha / rank * s;
          }
        off += static_cast<size_t>(rank) * li.IC + static_cast<size_t>(li.OC) * rank;
      }
    }
    return test::ref_gpt_loss(g, p, in.data(), tg.data(), B, T);
  };
  size_t off = 0;
  int checked = 0;
  for (const Lin& li : lins) {
    for (int l = 0; l < L; ++l) {
      const size_t na = static_cast<size_t>(rank) * li.IC, nb = static_cast<size_t>(li.OC) * rank;
      for (const auto& [begin, n] : {std::pair{off, na}, std::pair{off + na, nb}}) {
        std::vector<double> ref;
        std::vector<size_t> idx;
        for (size_t j = begin; j < begin + n; j += 5) {  // every 5th element
          const double eps = 1e-5, keep = ad[j];
          ad[j] = keep + eps;
          const double up = loss(ad);
          ad[j] = keep - eps;
          const double down = loss(ad);
          ad[j] = keep;
          ref.push_back((up - down) / (2 * eps));
          idx.push_back(j);
        }
        double maxref = 0, maxdiff = 0;
        for (size_t k = 0; k < ref.size(); ++k) {
          maxref = std::max(maxref, std::fabs(ref[k]));
          maxdiff = std::max(maxdiff, std::fabs(ref[k] - got[idx[k]]));
        }
        EXPECT_GT(maxref, 1e-4) << "linear " << li.index << " layer " << l;
        EXPECT_LE(maxdiff, 2e-3 * maxref) << "linear " << li.index << " layer " << l;
        checked += static_cast<int>(ref.size());
      }
      off += na + nb;
    }
  }
  EXPECT_GT(checked, 300);
}

TEST(QloraModel, DropoutMasksAreKeyedAndRecomputeSeesTheSame) {
  CachingAllocator alloc;
  const int B = 2, T = 8;
  std::vector<int32_t> in, tg;
  make_batch(in, tg, B, T, 60);
  auto grads = [&](Checkpointing ck, uint64_t key, float p) {
    ModelOptions o = lora_options(4, 8, p);
    o.checkpointing = ck;
    GptModel q(tiny_config(), alloc, o);
    q.init_weights(2);
    randomize_adapters(q, 9);
    q.set_lora_dropout_key(key);
    q.forward_backward(in.data(), tg.data(), B, T, 1.0f / (B * T), true);
    return std::vector<float>(q.lora_grads(), q.lora_grads() + q.lora_num_params());
  };
  const std::vector<float> a = grads(Checkpointing::kNone, 1, 0.3f);
  EXPECT_EQ(a, grads(Checkpointing::kBlock, 1, 0.3f));  // the recomputed blocks redraw the masks
  EXPECT_NE(a, grads(Checkpointing::kNone, 2, 0.3f));   // another micro-batch, other masks
  EXPECT_NE(a, grads(Checkpointing::kNone, 1, 0.0f));   // dropout does act
  // Evaluation never drops.
  GptModel q1(tiny_config(), alloc, lora_options(4, 8, 0.5f));
  GptModel q0(tiny_config(), alloc, lora_options(4, 8, 0.0f));
  q1.init_weights(2);
  q0.init_weights(2);
  randomize_adapters(q1, 9);
  randomize_adapters(q0, 9);
  EXPECT_EQ(q1.forward_loss(in.data(), tg.data(), B, T),
            q0.forward_loss(in.data(), tg.data(), B, T));
}

TEST(QloraModel, HoldsNoFp32BlockLinearsAndNoFrozenGradients) {
  CachingAllocator alloc;
  GptConfig g = tiny_config();
  g.channels = 64;
  g.num_heads = 4;
  GptModel q(g, alloc, lora_options(8, 16));
  q.init_weights(1);
  const ParamLayout full = ParamLayout::make(g);
  const size_t linears =
      full.sizes[kQkvw] + full.sizes[kAttprojw] + full.sizes[kFcw] + full.sizes[kFcprojw];
  EXPECT_EQ(q.num_params(), full.total - linears);
  EXPECT_EQ(q.grads(), nullptr);  // frozen: no gradient buffer at all
  const double bits = 8.0 * q.nf4_bytes() / linears;
  EXPECT_GT(bits, 4.0);
  EXPECT_LT(bits, 4.3);
  // Adapters: per layer r (IC + OC) per linear.
  const size_t C = g.channels, r = 8;
  EXPECT_EQ(q.lora_num_params(),
            g.num_layers * r * ((C + 3 * C) + (C + C) + (C + 4 * C) + (4 * C + C)));
  std::vector<float> before(q.params(), q.params() + q.num_params());
  std::vector<int32_t> in, tg;
  make_batch(in, tg, 2, 8, 60);
  q.forward_backward(in.data(), tg.data(), 2, 8, 1.0f / 16, true);
  EXPECT_EQ(before, std::vector<float>(q.params(), q.params() + q.num_params()));
}

// bf16 GEMM operands for the NF4 linears and the LM head: the same function and adapter
// gradients within bf16's rounding (loss within 1%, gradient direction cosine > 0.99).
TEST(QloraModel, Bf16OperandsTrackTheFp32Model) {
  CachingAllocator alloc;
  const int B = 2, T = 8;
  std::vector<int32_t> in, tg;
  make_batch(in, tg, B, T, 60);
  auto run = [&](Precision p, double* loss) {
    ModelOptions o = lora_options(4, 8);
    o.precision = p;
    GptModel q(tiny_config(), alloc, o);
    q.init_weights(4);
    randomize_adapters(q, 6);
    *loss = q.forward_backward(in.data(), tg.data(), B, T, 1.0f / (B * T), true);
    return std::vector<float>(q.lora_grads(), q.lora_grads() + q.lora_num_params());
  };
  double l32 = 0, l16 = 0;
  const std::vector<float> g32 = run(Precision::kFp32, &l32), g16 = run(Precision::kBf16, &l16);
  EXPECT_NEAR(l16, l32, 1e-2 * l32);
  double dot = 0, n32 = 0, n16 = 0;
  for (size_t i = 0; i < g32.size(); ++i) {
    dot += static_cast<double>(g32[i]) * g16[i];
    n32 += static_cast<double>(g32[i]) * g32[i];
    n16 += static_cast<double>(g16[i]) * g16[i];
  }
  EXPECT_GT(dot / std::sqrt(n32 * n16), 0.99);
  EXPECT_NE(g32, g16);  // the bf16 path did run
}

TEST(QloraModel, RefusesWhatItCannotRun) {
  CachingAllocator alloc;
  ModelOptions o = lora_options(4, 8);
  o.precision = Precision::kFp16;
  EXPECT_THROW(GptModel(tiny_config(), alloc, o), ConfigError);
  LoraConfig c;
  EXPECT_THROW(parse_lora_targets("attn,ffn", c), ConfigError);
  parse_lora_targets("mlp", c);
  EXPECT_FALSE(c.attn);
  EXPECT_TRUE(c.mlp);
  EXPECT_EQ(c.targets_text(), "mlp");
  EXPECT_THROW(GptModel(tiny_config(), alloc, lora_options(4, 8, 1.0f)), ConfigError);
}

}  // namespace
}  // namespace ft::trainer
