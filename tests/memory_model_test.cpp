// memory_model_test.cpp: the tuner's peak-memory prediction against the allocator's measured peak.
#include "ft/tuner/memory_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/trainer/checkpoint_io.h"
#include "ft/trainer/model.h"
#include "ft/trainer/trainer.h"
#include "test_scratch.h"

namespace ft::tuner {
namespace {

namespace fs = std::filesystem;

fs::path corpus() {
  static const fs::path p = [] {
    const fs::path d =
        fs::temp_directory_path() / ("ft_memory_model_" + std::to_string(::getpid()));
    fs::create_directories(d);
    ft::test::remove_at_exit(d);
    std::string text;
    for (int i = 0; i < 3000; ++i)
      text +=
          "And God said, Let there be light: and there was light. " + std::to_string(i) + "\n\n";
    write_file_atomic(d / "c.txt", text);
    return d / "c.txt";
  }();
  return p;
}

struct Case {
  std::string args;
};

trainer::TrainConfig parse(const std::string& args) {
  std::vector<std::string> words{"ft-train"};
  size_t pos = 0;
  while (pos < args.size()) {
    const size_t sp = args.find(' ', pos);
    const std::string w = args.substr(pos, sp == std::string::npos ? std::string::npos : sp - pos);
    if (!w.empty()) words.push_back(w);
    if (sp == std::string::npos) break;
    pos = sp + 1;
  }
  words.push_back("--data");
  words.push_back(corpus().string());
  std::vector<const char*> argv;
  for (auto& w : words) argv.push_back(w.c_str());
  auto c = trainer::parse_train_args(static_cast<int>(argv.size()), argv.data());
  return *c;
}

// Issue 22's bound: within 2% of the allocator's measured peak (issue 6 asked 10%). The peak
// is deterministic for a configuration, so the bound is exact, not statistical.
constexpr double kTolerance = 0.02;

// Runs one step of `t` and checks `est` against the allocator's measured peak (printed);
// returns the relative error.
double step_and_compare(trainer::Trainer& t, const MemoryEstimate& est, const std::string& what) {
  t.step();
  const double measured = static_cast<double>(t.allocator().stats().peak_allocated);
  const double err = (static_cast<double>(est.peak) - measured) / measured;
  std::printf("%-110s predicted %10zu measured %10.0f error %+6.2f%% (%s)\n", what.c_str(),
              est.peak, measured, 100 * err, est.phase_at_peak.c_str());
  EXPECT_LE(std::abs(err), kTolerance) << what;
  return err;
}

TEST(MemoryModel, PredictsMeasuredPeakWithinTwoPercent) {
  // A recycled large block's unsplit tail (up to 1 MiB) is what the model cannot see: the last
  // case, a 24 MB model, is where it would weigh most.
  const std::vector<std::string> cases = {
      "--layers 3 --heads 4 --channels 256 --vocab 8192 --seq-len 256 --micro-batch 8 --attention "
      "flash",
      "--layers 3 --heads 4 --channels 256 --vocab 8192 --seq-len 256 --micro-batch 8 --checkpoint "
      "block --attention flash",
      "--layers 2 --heads 4 --channels 256 --vocab 8192 --seq-len 256 --micro-batch 8 --attention "
      "naive",
      "--layers 2 --heads 4 --channels 256 --vocab 8192 --seq-len 256 --micro-batch 8 --precision "
      "bf16 --attention flash",
      "--layers 2 --heads 4 --channels 256 --vocab 8192 --seq-len 256 --micro-batch 8 --precision "
      "fp16 --attention flash",
      "--layers 2 --heads 4 --channels 256 --vocab 8192 --seq-len 256 --micro-batch 8 --precision "
      "bf16 --head-chunk-mb 4",
      "--layers 4 --heads 4 --channels 256 --vocab 256 --seq-len 512 --micro-batch 4 --checkpoint "
      "block --precision bf16",
      "--layers 2 --heads 8 --channels 512 --vocab 256 --seq-len 128 --micro-batch 4 --attention "
      "naive --precision bf16",
      "--layers 2 --heads 2 --channels 64 --vocab 5000 --seq-len 64 --micro-batch 8",
  };

  double worst = 0;
  for (const std::string& args : cases) {
    trainer::TrainConfig c = parse(args + " --steps 1 --threads 2 --val-batches 1 --val-every 0");
    trainer::Trainer t(c);
    worst = std::max(worst, std::abs(step_and_compare(t, predict_memory(c), args)));
  }
  std::printf("worst relative error %.2f%% (tolerance %.0f%%)\n", 100 * worst, 100 * kTolerance);
}

TEST(MemoryModel, ShardingAndRecomputeShrinkTheRightParts) {
  trainer::TrainConfig c =
      parse("--layers 4 --heads 4 --channels 128 --vocab 256 --seq-len 128 --micro-batch 8");
  const MemoryEstimate base = predict_memory(c);
  const MemoryEstimate z1 = predict_memory(c, {4, 1});
  const MemoryEstimate z2 = predict_memory(c, {4, 2});
  const MemoryEstimate z3 = predict_memory(c, {4, 3});
  EXPECT_EQ(z1.grads, base.grads);
  EXPECT_LT(z1.optimizer, base.optimizer / 3);
  // ZeRO-2 receives only its shard but ft's backward keeps the flat gradient buffer; its
  // staging adds a receive buffer. ZeRO-3 shards parameters and gradients too (the non-block
  // tensors stay whole) and stages no bucket.
  EXPECT_EQ(z2.grads, base.grads);
  EXPECT_GT(z2.comm_buffers, z1.comm_buffers);
  EXPECT_GT(z1.comm_buffers, 0u);
  EXPECT_LT(z3.params, base.params / 2);
  EXPECT_LT(z3.grads, base.grads / 2);
  EXPECT_LT(z3.optimizer, base.optimizer / 3);
  EXPECT_EQ(z3.comm_buffers, 0u);
  EXPECT_GT(z3.block_transient, base.block_transient);  // the gathered blocks
  c.options.checkpointing = trainer::Checkpointing::kBlock;
  const MemoryEstimate rc = predict_memory(c);
  EXPECT_LT(rc.activations, base.activations);
  EXPECT_EQ(rc.params, base.params);
}

// Tensor and pipeline sharding (a model of the sharded engine, not yet measured against it):
// each layout shrinks exactly the parts it shards.
TEST(MemoryModel, TensorAndPipelineParallelShardTheRightParts) {
  trainer::TrainConfig c =
      parse("--layers 4 --heads 4 --channels 128 --vocab 256 --seq-len 128 --micro-batch 8");
  const MemoryEstimate base = predict_memory(c);
  const trainer::ParamLayout pl = trainer::ParamLayout::make(c.model);
  size_t sharded = 0;
  for (int i : {trainer::kQkvw, trainer::kQkvb, trainer::kAttprojw, trainer::kFcw, trainer::kFcb,
                trainer::kFcprojw}) {
    sharded += pl.sizes[static_cast<size_t>(i)];
  }
  ParallelLayout tp2;
  tp2.tp = 2;
  const MemoryEstimate t = predict_memory(c, tp2);
  // 4 bytes a parameter, in the block the allocator gives the flat buffer.
  EXPECT_EQ(t.params, allocator_block_bytes(4 * (pl.total - sharded / 2)));
  EXPECT_EQ(t.optimizer, 2 * allocator_block_bytes(4 * (pl.total - sharded / 2)));
  EXPECT_LT(t.activations, base.activations);
  EXPECT_GT(t.activations, base.activations / 2);    // LayerNorms and the residual stay whole
  EXPECT_EQ(t.head_transient, base.head_transient);  // the LM head is not sharded
  EXPECT_LE(t.block_transient, base.block_transient);

  // PP=2 with 4 micro-batches: stage 0 has blocks 0-1 + embeddings and 2 micro-batches in
  // flight; stage 1 has blocks 2-3, the final LayerNorm and the tied head (a copy of wte).
  c.grad_accum = 4;
  ParallelLayout pp;
  pp.pp = 2;
  pp.stage = 0;
  const MemoryEstimate s0 = predict_memory(c, pp);
  pp.stage = 1;
  const MemoryEstimate s1 = predict_memory(c, pp);
  const size_t wte = pl.sizes[trainer::kWte];
  const size_t lnf = pl.sizes[trainer::kLnfw] + pl.sizes[trainer::kLnfb];
  const size_t blocks = pl.total - wte - pl.sizes[trainer::kWpe] - lnf;
  EXPECT_EQ(s0.params, allocator_block_bytes(4 * (wte + pl.sizes[trainer::kWpe] + blocks / 2)));
  EXPECT_EQ(s1.params, allocator_block_bytes(4 * (wte + lnf + blocks / 2)));
  EXPECT_EQ(s0.head_transient, 0u);
  EXPECT_EQ(s1.head_transient, base.head_transient);
  EXPECT_GT(s0.activations, s1.activations);  // two micro-batches in flight against one
  pp.stage = -1;
  EXPECT_EQ(predict_memory(c, pp).peak, std::max(s0.peak, s1.peak));
  EXPECT_NE(predict_memory(c, pp).phase_at_peak.find("of 2)"), std::string::npos);

  // ParallelLayout::of reads the run's --dp/--zero/--tp/--pp.
  c.parallel.dp = 2;
  c.parallel.zero = 1;
  const MemoryEstimate z = predict_memory(c, ParallelLayout::of(c.parallel));
  EXPECT_NEAR(static_cast<double>(z.optimizer),
              static_cast<double>(predict_memory(c).optimizer) / 2, 1024);
  ParallelLayout bad;
  bad.tp = 3;
  EXPECT_THROW(predict_memory(c, bad), ConfigError);
  bad.tp = 1;
  bad.pp = 5;
  EXPECT_THROW(predict_memory(c, bad), ConfigError);
}

// QLoRA fine-tuning: frozen fp32 tensors, NF4 linears, adapters with AdamW state, the adapters'
// activations and scratch, against the allocator's measured peak (the NF4 storage is allocated
// from it too), and the model-state saving against full fine-tuning.
TEST(MemoryModel, PredictsQloraPeakAndItsSaving) {
  const std::string wide =
      "--layers 3 --heads 4 --channels 256 --vocab 8192 --seq-len 256 --micro-batch 8 ";
  // A byte vocabulary and long sequences: the block phase, not the LM head, holds the peak.
  const std::string deep =
      "--layers 4 --heads 4 --channels 256 --vocab 256 --seq-len 512 --micro-batch 4 ";
  const std::vector<std::string> cases = {
      wide + "--attention flash",
      wide + "--attention naive --lora-rank 16 --lora-targets attn",
      wide + "--attention flash --checkpoint block --lora-dropout 0.1",
      deep + "--attention flash --lora-dropout 0.1",
      wide + "--attention flash --precision bf16",
      deep + "--attention flash --precision bf16 --lora-dropout 0.1",
  };
  double worst = 0;
  for (const std::string& extra : cases) {
    const fs::path base = corpus().parent_path() / "qlora_base.bin";  // a model to fine-tune
    {
      trainer::TrainConfig c = parse(extra + " --qlora --init-from " + base.string());
      CachingAllocator alloc;
      trainer::GptModel m(c.model, alloc, trainer::ModelOptions{});
      m.init_weights(1);
      trainer::write_llmc_model(base, c.model, m.gather_full_params().data());
    }
    trainer::TrainConfig c = parse(extra + " --qlora --init-from " + base.string() +
                                   " --steps 1 --threads 2 --val-batches 1 --val-every 0");
    const MemoryEstimate est = predict_memory(c);
    trainer::Trainer t(c);
    worst = std::max(worst, std::abs(step_and_compare(t, est, "qlora " + extra)));
    // The NF4 term is the held bytes rounded to the allocator's blocks (3 allocations per
    // linear and layer, 12 per layer; the held bytes add the mean, 4 bytes, per tensor).
    EXPECT_GE(est.nf4 + 12 * 3 * 4, t.model().nf4_bytes());
    EXPECT_LE(est.nf4, t.model().nf4_bytes() + 12 * 3 * 512);
    // Model states: frozen + NF4 + adapters + AdamW against full fine-tuning's.
    trainer::TrainConfig full = c;
    full.options.lora = trainer::LoraConfig{};
    const MemoryEstimate f = predict_memory(full);
    const double q_states =
        static_cast<double>(est.params + est.grads + est.optimizer + est.nf4 + est.adapters);
    const double f_states = static_cast<double>(f.params + f.grads + f.optimizer);
    std::printf("  model states %.1f MiB vs full fine-tuning %.1f MiB (%.1fx)\n",
                q_states / 1048576, f_states / 1048576, f_states / q_states);
    EXPECT_GT(f_states / q_states, 3.0);
  }
  std::printf("qlora worst relative error %.2f%%\n", 100 * worst);
}

TEST(MemoryModel, KorthikantiFormula) {
  // GPT-3 175B-like layer, s=2048, b=1, h=12288, a=96: 34 s b h + 5 a s^2 b.
  const double bytes = korthikanti_activation_bytes_per_layer(1, 2048, 12288, 96, false);
  EXPECT_DOUBLE_EQ(bytes, 2048.0 * 12288 * 34 + 5.0 * 96 * 2048 * 2048);
  EXPECT_DOUBLE_EQ(korthikanti_activation_bytes_per_layer(1, 2048, 12288, 96, true),
                   2.0 * 2048 * 12288);
}

}  // namespace
}  // namespace ft::tuner
