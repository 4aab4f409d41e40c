// tensor_parallel_test.cpp: Megatron tensor parallelism on 2 ranks equals the one-process model
// (blocks, training, bf16, checkpoints). FT_TEST_RANKS 2
#include "ft/trainer/tensor_parallel.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "ft/core/allocator.h"
#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/core/rng.h"
#include "ft/trainer/communicator.h"
#include "ft/trainer/model.h"
#include "ft/trainer/trainer.h"
#include "../test_scratch.h"
#include "test_corpus.h"

namespace ft::trainer {
namespace {

namespace fs = std::filesystem;

Communicator& world() {
  static std::unique_ptr<Communicator> w = make_world_communicator(60.0);
  return *w;
}

// ---- block level: GptModel with a TP group against the unsharded GptModel ----------------

GptConfig block_config(int layers) {
  GptConfig g;
  g.vocab_size = 60;
  g.padded_vocab = 64;
  g.channels = 32;
  g.num_heads = 4;
  g.num_layers = layers;
  g.max_seq_len = 16;
  return g;
}

// Non-trivial whole-model parameters (LayerNorm weights away from 1, biases non-zero),
// the same on every rank: drawn on the full layout from a fixed seed.
std::vector<float> random_full_params(const GptConfig& g, uint64_t seed) {
  CachingAllocator alloc;
  GptModel m(g, alloc, {});
  m.init_weights(seed);
  Rng rng(seed + 1);
  std::vector<float> p(m.params(), m.params() + m.num_params());
  for (int i = 0; i < kNumParamTensors; ++i) {
    const bool ln = i == kLn1w || i == kLn2w || i == kLnfw;
    const double s = tp_sharded(i) || i == kWte || i == kWpe ? 0.1 : (ln ? 0.2 : 0.05);
    float* t = p.data() + m.layout().offsets[i];
    size_t n = m.layout().sizes[i];
    if (i == kWte) n = static_cast<size_t>(g.vocab_size) * g.channels;
    for (size_t j = 0; j < n; ++j) t[j] += static_cast<float>(rng.normal() * s);
  }
  return p;
}

void set_params(GptModel& m, const std::vector<float>& full) {
  for (int i = 0; i < kNumParamTensors; ++i) {
    m.load_full_tensor(i, full.data() + m.full_layout().offsets[i]);
  }
  m.refresh_low_precision();
}

// The TP model's gradients in the whole-model layout (all-gathered shards).
std::vector<float> gather_grads(GptModel& m, Communicator& tp) {
  const ParamLayout& full = m.full_layout();
  std::vector<float> out(full.total);
  for (int i = 0; i < kNumParamTensors; ++i) {
    float* dst = out.data() + full.offsets[i];
    const size_t n = m.layout().sizes[i];
    if (!tp_sharded(i)) {
      std::copy(m.grad(i), m.grad(i) + n, dst);
      continue;
    }
    std::vector<float> all(n * tp.world_size());
    tp.all_gather(m.grad(i), all.data(), n);
    for (int r = 0; r < tp.world_size(); ++r) {
      tp_insert_shard(m.config(), i, r, tp.world_size(), all.data() + n * r, dst, full.sizes[i]);
    }
  }
  return out;
}

// Worst per-tensor max |a - b| / max |b| over the model; prints each tensor's.
double worst_rel_diff(const ParamLayout& lay, const std::vector<float>& got,
                      const std::vector<float>& ref, const char* what, bool print) {
  double worst = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    double maxdiff = 0, maxref = 0;
    for (size_t j = lay.offsets[i]; j < lay.offsets[i] + lay.sizes[i]; ++j) {
      maxdiff = std::max(maxdiff, std::fabs(static_cast<double>(got[j]) - ref[j]));
      maxref = std::max(maxref, std::fabs(static_cast<double>(ref[j])));
    }
    const double rel = maxref > 0 ? maxdiff / maxref : maxdiff;
    if (print) {
      std::printf("  %s %-9s max |diff| %.3e (max |ref| %.3e, rel %.3e)\n", what,
                  ParamLayout::name(i), maxdiff, maxref, rel);
    }
    worst = std::max(worst, rel);
  }
  return worst;
}

void check_blocks(const ModelOptions& o, int layers, const char* label) {
  const GptConfig g = block_config(layers);
  const int B = 2, T = 16;
  auto tp = world().split(0, world().rank(), CommGroup::kTp);
  CachingAllocator alloc;
  GptModel ref(g, alloc, o);
  ModelSharding sh;
  sh.tp = tp.get();
  GptModel par(g, alloc, o, sh);
  ASSERT_EQ(par.tp_size(), 2);
  ASSERT_EQ(par.full_layout().total, ref.num_params());
  for (int i = 0; i < kNumParamTensors; ++i) {
    ASSERT_EQ(par.layout().sizes[i], ref.layout().sizes[i] / (tp_sharded(i) ? 2 : 1)) << i;
  }
  const std::vector<float> full = random_full_params(g, 17);
  set_params(ref, full);
  set_params(par, full);
  std::vector<int32_t> in(B * T), tg(B * T);
  Rng rng(5);
  for (auto& x : in) x = static_cast<int32_t>(rng.next_u64() % g.vocab_size);
  for (auto& x : tg) x = static_cast<int32_t>(rng.next_u64() % g.vocab_size);
  // Two micro-batches: the second accumulates into the gradients.
  double lr = 0, lp = 0;
  for (int k = 0; k < 2; ++k) {
    lr += ref.forward_backward(in.data(), tg.data(), B, T, 1.0f / (2 * B * T), k == 0);
    lp += par.forward_backward(in.data(), tg.data(), B, T, 1.0f / (2 * B * T), k == 0);
    std::reverse(in.begin(), in.end());
  }
  const double eval_r = ref.forward_loss(in.data(), tg.data(), B, T);
  const double eval_p = par.forward_loss(in.data(), tg.data(), B, T);
  const std::vector<float> gref(ref.grads(), ref.grads() + ref.num_params());
  const std::vector<float> gpar = gather_grads(par, *tp);
  const bool print = world().rank() == 0;
  if (print) {
    std::printf(
        "%s: loss one-process %.9f tp2 %.9f (|diff| %.2e), eval %.9f vs %.9f (|diff| %.2e)\n",
        label, lr / 2, lp / 2, std::fabs(lr - lp) / 2, eval_r, eval_p, std::fabs(eval_r - eval_p));
  }
  const double worst = worst_rel_diff(ref.layout(), gpar, gref, "grad", print);
  if (print)
    std::printf("%s: worst per-tensor grad rel diff %.3e (tolerance 1e-5)\n", label, worst);
  // fp32 sums over C/2 + C/2 instead of C: rounding differences only.
  EXPECT_NEAR(lp, lr, 2e-6);
  EXPECT_NEAR(eval_p, eval_r, 2e-6);
  EXPECT_LT(worst, 1e-5);
  // Replicated tensors' gradients are the same bits on both TP ranks.
  for (int i = 0; i < kNumParamTensors; ++i) {
    if (tp_sharded(i)) continue;
    const size_t n = par.layout().sizes[i];
    std::vector<float> both(2 * n);
    tp->all_gather(par.grad(i), both.data(), n);
    EXPECT_TRUE(std::equal(both.begin(), both.begin() + n, both.begin() + n))
        << ParamLayout::name(i) << " gradient differs between the TP ranks";
  }
}

TEST(TensorParallel, BlocksMatchUnshardedFlash) {
  check_blocks({Precision::kFp32, Checkpointing::kNone, AttentionImpl::kFlash, {}}, 2, "flash");
}

TEST(TensorParallel, BlocksMatchUnshardedNaiveAttention) {
  check_blocks({Precision::kFp32, Checkpointing::kNone, AttentionImpl::kMaterialized, {}}, 1, "naive");
}

TEST(TensorParallel, BlocksMatchUnshardedWithRecompute) {
  check_blocks({Precision::kFp32, Checkpointing::kBlock, AttentionImpl::kFlash, {}}, 2, "recompute");
}

TEST(TensorParallel, ShardedInitEqualsOneProcessInit) {
  const GptConfig g = block_config(2);
  auto tp = world().split(0, world().rank(), CommGroup::kTp);
  CachingAllocator alloc;
  GptModel ref(g, alloc, {});
  ModelSharding sh;
  sh.tp = tp.get();
  GptModel par(g, alloc, {}, sh);
  ref.init_weights(1337);
  par.init_weights(1337);
  const std::vector<float> gathered = par.gather_full_params();
  ASSERT_EQ(gathered.size(), ref.num_params());
  EXPECT_TRUE(std::equal(gathered.begin(), gathered.end(), ref.params()));
}

// ---- training: Trainer with --tp 2 against one process --------------------------------------

fs::path rank_dir(const std::string& name) {
  return ft::test::scratch_dir("ft_tp_test_" + name);
}

// A directory both ranks use (named from rank 0's pid).
fs::path shared_dir(const std::string& name) {
  const double mine = static_cast<double>(::getpid());
  double both[2];
  world().all_gather(&mine, both, 1);
  fs::path d = fs::temp_directory_path() /
               ("ft_tp_test_" + name + "_" + std::to_string(static_cast<long>(both[0])));
  if (world().rank() == 0) {
    fs::remove_all(d);
    fs::create_directories(d);
    ft::test::remove_at_exit(d);
  }
  world().barrier();
  return d;
}

fs::path write_corpus(const fs::path& dir) {
  return ft::test::write_word_corpus(dir, 60);
}

TrainConfig small_run(const fs::path& corpus) {
  TrainConfig c;
  c.model.vocab_size = 256;
  c.model.padded_vocab = 256;
  c.model.channels = 64;
  c.model.num_heads = 4;
  c.model.num_layers = 2;
  c.model.max_seq_len = 32;
  c.seq_len = 32;
  c.micro_batch = 4;
  c.grad_accum = 2;
  c.steps = 8;
  c.warmup = 2;
  c.lr = 3e-3f;
  c.min_lr = 3e-4f;
  c.threads = 1;
  c.data = corpus.string();
  c.val_batches = 2;
  return c;
}

struct Curve {
  std::vector<double> loss, norm;
  std::vector<bool> skipped;
  double val = 0;
};

Curve train(Trainer& t, int steps) {
  Curve r;
  for (int s = 0; s < steps && !t.done(); ++s) {
    const StepMetrics m = t.step();
    r.loss.push_back(m.loss);
    r.norm.push_back(m.grad_norm);
    r.skipped.push_back(m.skipped);
  }
  r.val = t.evaluate();
  return r;
}

// A fresh world communicator for one Trainer (which takes ownership).
std::unique_ptr<Communicator> fresh_world() {
  return world().split(0, world().rank(), CommGroup::kWorld);
}

double max_loss_diff(const Curve& a, const Curve& b) {
  double d = 0;
  for (size_t i = 0; i < std::min(a.loss.size(), b.loss.size()); ++i) {
    d = std::max(d, std::fabs(a.loss[i] - b.loss[i]));
  }
  return d;
}

void print_runs(const char* label, const Curve& tp, const Curve& one) {
  if (world().rank() != 0) return;
  for (size_t i = 0; i < tp.loss.size(); ++i) {
    std::printf("  %s step %zu: loss tp2 %.7f one %.7f  gnorm %.6f vs %.6f\n", label, i, tp.loss[i],
                one.loss[i], tp.norm[i], one.norm[i]);
  }
}

TEST(TensorParallel, TrainingMatchesOneProcess) {
  const fs::path dir = rank_dir("train");
  TrainConfig c = small_run(write_corpus(dir));
  Trainer one(c, make_local_communicator());
  const Curve ro = train(one, c.steps);
  c.parallel.tp = 2;
  Trainer par(c, fresh_world());
  ASSERT_EQ(par.model().tp_size(), 2);
  const Curve rp = train(par, c.steps);
  print_runs("fp32", rp, ro);
  const double d = max_loss_diff(rp, ro);
  double dn = 0;
  for (size_t i = 0; i < ro.norm.size(); ++i)
    dn = std::max(dn, std::fabs(rp.norm[i] - ro.norm[i]) / ro.norm[i]);
  if (world().rank() == 0) {
    std::printf(
        "fp32 tp2 vs one process over %d steps: max |loss diff| %.3e (tolerance 1e-5), "
        "max grad-norm rel diff %.3e (tolerance 1e-4), val %.7f vs %.7f\n",
        c.steps, d, dn, rp.val, ro.val);
  }
  EXPECT_LT(d, 1e-5);
  EXPECT_LT(dn, 1e-4);
  EXPECT_NEAR(rp.val, ro.val, 1e-5);
  // The trained whole model equals the one-process model; the replicated tensors hold the
  // same bits on both TP ranks (identical gradients, identical updates).
  const std::vector<float> full = par.model().gather_full_params();
  const std::vector<float> ref(one.model().params(),
                               one.model().params() + one.model().num_params());
  worst_rel_diff(one.model().layout(), full, ref, "param", world().rank() == 0);
  double w = 0;
  for (size_t j = 0; j < full.size(); ++j)
    w = std::max(w, static_cast<double>(std::fabs(full[j] - ref[j])));
  // AdamW divides each gradient element by its own RMS, so elements whose gradient is
  // near rounding noise (e.g. the key bias, whose exact gradient is zero) amplify the
  // fp32 differences; bound the absolute difference against lr * steps = 2.4e-2, the
  // farthest AdamW can move a parameter in these 8 steps.
  if (world().rank() == 0) {
    std::printf("trained params max |diff| %.3e (tolerance 5e-5 = 0.2%% of lr*steps)\n", w);
  }
  EXPECT_LT(w, 5e-5);
  const ParamLayout& lay = par.model().layout();
  for (int i = 0; i < kNumParamTensors; ++i) {
    if (tp_sharded(i)) continue;
    std::vector<float> both(2 * lay.sizes[i]);
    par.groups().tp->all_gather(par.model().param(i), both.data(), lay.sizes[i]);
    EXPECT_TRUE(std::equal(both.begin(), both.begin() + lay.sizes[i], both.begin() + lay.sizes[i]))
        << ParamLayout::name(i) << " differs between the TP ranks after training";
  }
  fs::remove_all(dir);
}

TEST(TensorParallel, LowPrecisionWithinToleranceOfFp32) {
  const fs::path dir = rank_dir("lowp");
  TrainConfig c = small_run(write_corpus(dir));
  c.steps = 6;
  Trainer fp32(c, make_local_communicator());
  const Curve r32 = train(fp32, c.steps);
  c.options.precision = Precision::kBf16;
  Trainer bf_one(c, make_local_communicator());
  const Curve rb1 = train(bf_one, c.steps);
  c.parallel.tp = 2;
  Trainer bf_tp(c, fresh_world());
  const Curve rb2 = train(bf_tp, c.steps);
  c.options.precision = Precision::kFp16;
  c.parallel.tp = 1;
  Trainer fp16_one(c, make_local_communicator());
  const Curve rh1 = train(fp16_one, c.steps);
  c.parallel.tp = 2;
  Trainer fp16_tp(c, fresh_world());
  const Curve rh2 = train(fp16_tp, c.steps);
  print_runs("bf16", rb2, r32);
  const double d_bf_fp32 = max_loss_diff(rb2, r32), d_bf_bf = max_loss_diff(rb2, rb1);
  const double d_h_fp32 = max_loss_diff(rh2, r32), d_h_h = max_loss_diff(rh2, rh1);
  if (world().rank() == 0) {
    std::printf(
        "bf16 tp2: max |loss diff| vs fp32 one process %.3e (tolerance 2e-2), vs bf16 one "
        "process %.3e (tolerance 5e-3)\n",
        d_bf_fp32, d_bf_bf);
    std::printf(
        "fp16 tp2: max |loss diff| vs fp32 one process %.3e (tolerance 5e-3), vs fp16 one "
        "process %.3e (tolerance 1e-3)\n",
        d_h_fp32, d_h_h);
  }
  // bf16 keeps 8 mantissa bits: the same tolerance as one process's bf16 against fp32
  // (model_grad_test); against one-process bf16 only the fp32 accumulation order and a
  // few operands rounding the other way differ.
  EXPECT_LT(d_bf_fp32, 2e-2);
  EXPECT_LT(d_bf_bf, 5e-3);
  EXPECT_LT(d_h_fp32, 5e-3);
  EXPECT_LT(d_h_h, 1e-3);
  EXPECT_EQ(rh2.skipped, rh1.skipped);  // the loss scaler decides the same on every step
  fs::remove_all(dir);
}

TEST(TensorParallel, ResumeEqualsUninterruptedAndChecksTheLayout) {
  const fs::path dir = rank_dir("resume");
  const fs::path ckpt = shared_dir("ckpt");
  TrainConfig c = small_run(write_corpus(dir));
  c.parallel.tp = 2;
  Trainer whole(c, fresh_world());
  const Curve rw = train(whole, c.steps);
  Curve ra;
  {
    Trainer first(c, fresh_world());
    ra = train(first, 4);
    first.save(ckpt.string());
  }
  EXPECT_TRUE(fs::exists(ckpt / ("rank" + std::to_string(world().rank())) / "checkpoint.ft"));
  c.resume_dir = ckpt.string();
  Trainer second(c, fresh_world());
  EXPECT_EQ(second.next_step(), 4);
  const Curve rb = train(second, 4);
  ra.loss.insert(ra.loss.end(), rb.loss.begin(), rb.loss.end());
  const double d = max_loss_diff(ra, rw);
  if (world().rank() == 0) {
    std::printf(
        "tp2 resume after 4 steps vs uninterrupted: max |loss diff| %.3e (tolerance: "
        "bitwise equal)\n",
        d);
  }
  EXPECT_EQ(d, 0.0);
  EXPECT_EQ(rb.val, rw.val);
  // The same files under --dp 2 (TP degree 1): a clear error naming the TP layout.
  c.parallel.tp = 1;
  c.parallel.dp = 2;
  try {
    Trainer wrong(c, fresh_world());
    ADD_FAILURE() << "resuming a --tp 2 checkpoint with --tp 1 did not fail";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    // The layout check of the multi-rank checkpoint (parallel.json) names both layouts and
    // the command that resumes it.
    EXPECT_NE(msg.find("layout"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tp 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tp 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--tp 2"), std::string::npos) << msg;
    if (world().rank() == 0) std::printf("layout mismatch: %s\n", msg.c_str());
  }
  world().barrier();
  if (world().rank() == 0) fs::remove_all(ckpt);
  fs::remove_all(dir);
}

TEST(TensorParallel, HeadsNotDivisibleByTpIsAClearError) {
  const fs::path dir = rank_dir("bad");
  TrainConfig c = small_run(write_corpus(dir));
  c.model.num_heads = 3;
  c.model.channels = 48;
  c.parallel.tp = 2;
  try {
    Trainer t(c, fresh_world());
    ADD_FAILURE() << "--tp 2 with 3 heads did not fail";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--tp 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("3 heads"), std::string::npos) << msg;
    if (world().rank() == 0) std::printf("bad shape: %s\n", msg.c_str());
  }
  // The model itself refuses too (e.g. when built without the Trainer).
  auto tp = world().split(0, world().rank(), CommGroup::kTp);
  CachingAllocator alloc;
  ModelSharding sh;
  sh.tp = tp.get();
  EXPECT_THROW(GptModel(c.model, alloc, {}, sh), ConfigError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ft::trainer
