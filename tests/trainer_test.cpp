// trainer_test.cpp: schedule, resume-equals-uninterrupted, accumulation, fp16 loss scaling, OOM and checkpoint errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/core/rng.h"
#include "ft/trainer/schedule.h"
#include "ft/trainer/trainer.h"
#include "test_scratch.h"
#include "test_corpus.h"

namespace ft::trainer {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  return ft::test::scratch_dir("ft_trainer_test_" + name);
}

// A synthetic text corpus with learnable structure (repeated phrases with variations).
fs::path write_corpus(const fs::path& dir) {
  return ft::test::write_word_corpus(dir, 60);
}

TrainConfig small_run(const fs::path& corpus) {
  TrainConfig c;
  c.model.vocab_size = 256;
  c.model.padded_vocab = 256;
  c.model.channels = 32;
  c.model.num_heads = 2;
  c.model.num_layers = 2;
  c.model.max_seq_len = 32;
  c.seq_len = 32;
  c.micro_batch = 4;
  c.steps = 8;
  c.warmup = 2;
  c.lr = 3e-3f;
  c.min_lr = 3e-4f;
  c.threads = 2;
  c.data = corpus.string();
  c.val_batches = 2;
  return c;
}

TEST(TrainConfig, AttentionAutoPicksMaterialisedWhileItsProbabilitiesAreSmall) {
  const auto parse = [](std::vector<const char*> argv) {
    argv.insert(argv.begin(), "ft-train");
    return *parse_train_args(static_cast<int>(argv.size()), argv.data());
  };
  // Default (auto) at T 128, C 128, NH 4: head size 32, T <= 4 x 32, so materialised.
  TrainConfig c = parse({});
  EXPECT_TRUE(c.attention_auto);
  EXPECT_EQ(c.options.attention, AttentionImpl::kMaterialized);
  c = parse({"--seq-len", "256"});  // 256 > 128: the (B, NH, T, T) probabilities would dominate
  EXPECT_EQ(c.options.attention, AttentionImpl::kFlash);
  c = parse({"--seq-len", "256", "--heads", "2"});  // head size 64
  EXPECT_EQ(c.options.attention, AttentionImpl::kMaterialized);
  c = parse({"--attention", "flash"});
  EXPECT_FALSE(c.attention_auto);
  EXPECT_EQ(c.options.attention, AttentionImpl::kFlash);
  // The config file ft-tune writes names the kernel, not "auto".
  EXPECT_NE(parse({}).to_config_file().find("attention = naive"), std::string::npos);
  EXPECT_THROW(parse({"--attention", "fast"}), ConfigError);
}

TEST(Schedule, WarmupThenCosineToFloor) {
  EXPECT_FLOAT_EQ(learning_rate(0, 100, 10, 1.0f, 0.1f), 0.1f);
  EXPECT_FLOAT_EQ(learning_rate(9, 100, 10, 1.0f, 0.1f), 1.0f);
  EXPECT_FLOAT_EQ(learning_rate(10, 100, 10, 1.0f, 0.1f), 1.0f);
  EXPECT_NEAR(learning_rate(99, 100, 10, 1.0f, 0.1f), 0.1f, 1e-6);
  float prev = 2;
  for (int s = 10; s < 100; ++s) {
    const float lr = learning_rate(s, 100, 10, 1.0f, 0.1f);
    EXPECT_LE(lr, prev);
    prev = lr;
  }
}

TEST(Schedule, LossScalerHalvesOnOverflowAndGrowsAfterWindow) {
  LossScaler s;
  s.scale = 1024;
  s.growth_interval = 3;
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale, 512);
  EXPECT_FALSE(s.update(false));
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale, 512);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale, 1024);
  EXPECT_EQ(s.overflows, 1u);
}

TEST(Trainer, ResumeEqualsUninterruptedRun) {
  const fs::path dir = temp_dir("resume");
  const fs::path corpus = write_corpus(dir);
  for (Precision p : {Precision::kFp32, Precision::kFp16}) {
    TrainConfig c = small_run(corpus);
    c.options.precision = p;
    c.loss_scale_window = 2;  // exercise scaler state across the checkpoint
    std::vector<double> full;
    {
      Trainer t(c);
      while (!t.done()) full.push_back(t.step().loss);
    }
    std::vector<double> resumed;
    {
      Trainer t(c);
      for (int i = 0; i < 4; ++i) resumed.push_back(t.step().loss);
      t.save((dir / "ckpt").string());
    }
    {
      TrainConfig r = c;
      r.resume_dir = (dir / "ckpt").string();
      Trainer t(r);
      EXPECT_EQ(t.next_step(), 4);
      while (!t.done()) resumed.push_back(t.step().loss);
    }
    ASSERT_EQ(full.size(), resumed.size());
    for (size_t i = 0; i < full.size(); ++i) {
      std::printf("%s step %zu: uninterrupted %.9f resumed %.9f\n", precision_name(p), i, full[i], resumed[i]);
      EXPECT_EQ(full[i], resumed[i]) << "step " << i;  // tolerance: bitwise
    }
  }
  fs::remove_all(dir);
}

TEST(Trainer, GradAccumulationEqualsLargerMicroBatch) {
  const fs::path dir = temp_dir("accum");
  const fs::path corpus = write_corpus(dir);
  TrainConfig a = small_run(corpus);
  a.micro_batch = 8;
  a.grad_accum = 1;
  TrainConfig b = small_run(corpus);
  b.micro_batch = 4;
  b.grad_accum = 2;
  Trainer ta(a), tb(b);
  for (int s = 0; s < 6; ++s) {
    const double la = ta.step().loss, lb = tb.step().loss;
    std::printf("step %d: B=8 K=1 loss %.7f, B=4 K=2 loss %.7f\n", s, la, lb);
    EXPECT_NEAR(la, lb, 1e-4 * std::fabs(la)) << "step " << s;  // tolerance 1e-4 relative (fp32 sums reordered)
  }
  fs::remove_all(dir);
}

TEST(Trainer, Fp16DynamicLossScalingSkipsOverflowsAndRecovers) {
  const fs::path dir = temp_dir("fp16");
  TrainConfig c = small_run(write_corpus(dir));
  c.options.precision = Precision::kFp16;
  c.loss_scale = 1099511627776.0f;  // 2^40: the first steps must overflow
  c.loss_scale_window = 3;
  c.steps = 40;
  Trainer t(c);
  int skipped = 0, grew = 0;
  float prev_scale = c.loss_scale;
  double first_loss = -1, last_loss = 0;
  while (!t.done()) {
    StepMetrics m = t.step();
    if (first_loss < 0) first_loss = m.loss;
    last_loss = m.loss;
    skipped += m.skipped;
    const float next = t.loss_scaler().scale;
    if (m.skipped) {
      EXPECT_EQ(next, m.loss_scale / 2) << "overflow must halve the scale";
    }
    if (next > prev_scale) ++grew;
    prev_scale = next;
  }
  std::printf("fp16: %d skipped steps, scale grew %d times, final scale %g, loss %.4f -> %.4f\n", skipped,
              grew, t.loss_scaler().scale, first_loss, last_loss);
  EXPECT_GT(skipped, 0);
  EXPECT_GT(grew, 0);
  EXPECT_TRUE(std::isfinite(last_loss));
  EXPECT_LT(last_loss, first_loss);
  fs::remove_all(dir);
}

TEST(Trainer, MemoryLimitGivesClearOutOfMemoryError) {
  const fs::path dir = temp_dir("oom");
  TrainConfig c = small_run(write_corpus(dir));
  c.memory_limit = 600 * 1024;  // too small for params + grads + Adam state
  try {
    Trainer t(c);
    t.step();
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    std::printf("%s\n", msg.c_str());
    EXPECT_NE(msg.find("requested"), std::string::npos);
    EXPECT_NE(msg.find("fragmentation"), std::string::npos);
  }
  fs::remove_all(dir);
}

TEST(Trainer, CorruptOrTruncatedCheckpointIsAClearError) {
  const fs::path dir = temp_dir("corrupt");
  TrainConfig c = small_run(write_corpus(dir));
  c.steps = 2;
  {
    Trainer t(c);
    t.step();
    t.save((dir / "ok").string());
  }
  const fs::path file = dir / "ok" / "checkpoint.ft";
  const std::string bytes = read_file(file);
  // Truncated.
  fs::create_directories(dir / "trunc");
  write_file_atomic(dir / "trunc" / "checkpoint.ft", bytes.substr(0, bytes.size() / 2));
  // One bit flipped in the parameters.
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x10;
  fs::create_directories(dir / "flip");
  write_file_atomic(dir / "flip" / "checkpoint.ft", flipped);
  for (const char* bad : {"trunc", "flip", "missing"}) {
    TrainConfig r = c;
    r.resume_dir = (dir / bad).string();
    try {
      Trainer t(r);
      FAIL() << bad << ": expected an error";
    } catch (const Error& e) {
      std::printf("%s: %s\n", bad, e.what());
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << "error should name the file";
    }
  }
  // A model of another shape is refused with both shapes named.
  TrainConfig other = c;
  other.model.channels = 64;
  other.resume_dir = (dir / "ok").string();
  EXPECT_THROW(Trainer t(other), ConfigError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ft::trainer
