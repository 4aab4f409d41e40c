// dp_train_test.cpp: DP=2 (overlap on/off, several buckets), ZeRO-1, -2 and -3 against one
// process with twice the accumulation; ZeRO-3 against DP over 50 steps and its memory; per-rank
// checkpoints. FT_TEST_RANKS 2
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "../test_scratch.h"
#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/core/rng.h"
#include "ft/trainer/communicator.h"
#include "ft/trainer/trainer.h"
#include "ft/tuner/memory_model.h"
#include "test_corpus.h"

namespace ft::trainer {
namespace {

namespace fs = std::filesystem;

Communicator& world() {
  static std::unique_ptr<Communicator> w = make_world_communicator(60.0);
  return *w;
}

// Each rank writes the same synthetic corpus into its own directory.
fs::path rank_dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("ft_dp_test_" + name + "_" + std::to_string(::getpid()) +
                                   "_rank" + std::to_string(world().rank()));
  fs::remove_all(d);
  ft::test::remove_at_exit(d);
  fs::create_directories(d);
  return d;
}

fs::path write_corpus(const fs::path& dir) { return ft::test::write_word_corpus(dir, 60); }

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
  c.steps = 8;
  c.warmup = 2;
  c.lr = 3e-3f;
  c.min_lr = 3e-4f;
  c.threads = 1;
  c.loader_workers = 0;
  c.data = corpus.string();
  c.val_batches = 3;
  c.clip = 0.5f;  // low enough to clip: the global norm matters
  return c;
}

struct RunResult {
  std::vector<double> loss, norm;
  std::vector<float> params;
  double val = -1;
};

RunResult train(Trainer& t, int steps) {
  RunResult r;
  for (int i = 0; i < steps && !t.done(); ++i) {
    const StepMetrics m = t.step();
    r.loss.push_back(m.loss);
    r.norm.push_back(m.grad_norm);
  }
  r.val = t.evaluate();
  r.params = t.model().gather_full_params();  // ZeRO-3: collective over the DP group
  return r;
}

// One process (local communicator) with --grad-accum 2K: the reference of DP=2 with K.
RunResult reference(TrainConfig c) {
  c.grad_accum *= 2;
  c.parallel = ParallelConfig{};
  Trainer t(c, make_local_communicator());
  return train(t, c.steps);
}

RunResult data_parallel(const TrainConfig& c) {
  Trainer t(c, world().split(0, world().rank(), CommGroup::kWorld));
  return train(t, c.steps);
}

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

// Max relative loss / grad-norm difference and max absolute parameter difference, printed by
// rank 0, with the tolerances they are held to: fp32 sums in a different order.
void expect_close(const RunResult& got, const RunResult& ref, const std::string& what) {
  ASSERT_EQ(got.loss.size(), ref.loss.size());
  double dl = 0, dn = 0, dp = 0;
  for (size_t i = 0; i < ref.loss.size(); ++i) {
    dl = std::max(dl, rel(got.loss[i], ref.loss[i]));
    dn = std::max(dn, rel(got.norm[i], ref.norm[i]));
  }
  for (size_t i = 0; i < ref.params.size(); ++i) {
    dp = std::max(dp, static_cast<double>(std::abs(got.params[i] - ref.params[i])));
  }
  if (world().rank() == 0) {
    std::printf("%-34s max rel diff: loss %.2e  grad-norm %.2e  val %.2e; max |param diff| %.2e\n",
                what.c_str(), dl, dn, rel(got.val, ref.val), dp);
  }
  EXPECT_LT(dl, 1e-5) << what;
  EXPECT_LT(dn, 1e-4) << what;
  EXPECT_LT(rel(got.val, ref.val), 1e-5) << what;
  EXPECT_LT(dp, 1e-4) << what;
  EXPECT_LT(ref.loss.back(), ref.loss.front()) << "the reference learns";
}

struct Variant {
  const char* name;
  int zero;
  bool overlap;
  double bucket_mb;
  int accum;
};

TEST(DataParallel, MatchesOneProcessWithTwiceTheAccumulation) {
  const fs::path dir = rank_dir("equiv");
  const TrainConfig base = small_run(write_corpus(dir));
  // 0.02 MiB buckets: one or two blocks each here (a block is 49 k parameters), so several
  // buckets are in flight; 25 MiB: one bucket.
  const Variant variants[] = {
      {"dp2 overlap, small buckets", 0, true, 0.02, 1},
      {"dp2 no overlap, small buckets", 0, false, 0.02, 1},
      {"dp2 overlap, one bucket, K=2", 0, true, 25, 2},
      {"zero1 overlap, small buckets", 1, true, 0.02, 1},
      {"zero2 overlap, small buckets", 2, true, 0.02, 1},
      {"zero2 no overlap, K=2", 2, false, 0.02, 2},
      {"zero3", 3, true, 0.02, 1},
      {"zero3, K=2", 3, true, 0.02, 2},
  };
  RunResult ref1, ref2;
  for (const Variant& v : variants) {
    TrainConfig c = base;
    c.grad_accum = v.accum;
    c.parallel.dp = 2;
    c.parallel.zero = v.zero;
    c.parallel.overlap = v.overlap;
    c.parallel.bucket_mb = v.bucket_mb;
    RunResult& ref = v.accum == 1 ? ref1 : ref2;
    if (ref.loss.empty()) ref = reference(c);
    const RunResult got = data_parallel(c);
    expect_close(got, ref, v.name);
    // Every rank holds the same parameters, exactly (the same reduced sums, or all-gathered).
    std::vector<float> rank0 = got.params;
    world().broadcast(rank0.data(), rank0.size(), 0);
    EXPECT_EQ(got.params, rank0) << v.name;
  }
}

TEST(DataParallel, ResumeEqualsAnUninterruptedRun) {
  const fs::path dir = rank_dir("resume");
  // Every rank saves into the same directory, named after rank 0's pid.
  float pid0 = static_cast<float>(::getpid());
  world().broadcast(&pid0, 1, 0);
  const fs::path ckpt =
      fs::temp_directory_path() / ("ft_dp_test_ckpt_" + std::to_string(static_cast<long>(pid0)));
  for (int zero : {0, 1, 3}) {
    TrainConfig c = small_run(write_corpus(dir));
    c.parallel.dp = 2;
    c.parallel.zero = zero;
    c.parallel.bucket_mb = 0.02;
    c.loader_workers = 1;
    RunResult full;
    {
      Trainer t(c, world().split(0, world().rank(), CommGroup::kWorld));
      full = train(t, 8);
    }
    if (world().rank() == 0) {
      fs::remove_all(ckpt);
      ft::test::remove_at_exit(ckpt);
    }
    world().barrier();
    {
      Trainer t(c, world().split(0, world().rank(), CommGroup::kWorld));
      train(t, 4);
      t.save(ckpt.string());
    }
    EXPECT_TRUE(fs::exists(ckpt / "parallel.json"));
    EXPECT_TRUE(fs::exists(ckpt / ("rank" + std::to_string(world().rank())) / "checkpoint.ft"));
    TrainConfig rc = c;
    rc.resume_dir = ckpt.string();
    Trainer t(rc, world().split(0, world().rank(), CommGroup::kWorld));
    EXPECT_EQ(t.next_step(), 4);
    const RunResult rest = train(t, 8);
    ASSERT_EQ(rest.loss.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(rest.loss[i], full.loss[4 + i]) << "zero " << zero << " step " << 4 + i;
    }
    EXPECT_EQ(rest.params, full.params) << "zero " << zero;
    // A different layout is a clear error, not a silent mix-up.
    TrainConfig other = rc;
    other.parallel.zero = zero == 0 ? 1 : 0;
    try {
      Trainer bad(other, world().split(0, world().rank(), CommGroup::kWorld));
      ADD_FAILURE() << "resumed a zero " << zero << " checkpoint with zero " << other.parallel.zero;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("mpirun -np 2 ft-train --dp 2"), std::string::npos)
          << e.what();
    }
    TrainConfig single = rc;
    single.parallel = ParallelConfig{};
    single.parallel.zero = zero;
    EXPECT_THROW(Trainer(single, make_local_communicator()), ConfigError);
    world().barrier();
  }
  world().barrier();
  if (world().rank() == 0) fs::remove_all(ckpt);
}

// ZeRO-3 against plain DP with the same global batch over 50 steps (losses within 1e-6
// relative: the gradients are reduce-scattered per block instead of all-reduced, the same sums;
// with accumulation the per-micro-batch reduction adds in another order, see the K=2 variant
// above), and the model state each rank holds: the allocator's bytes once the trainer is built,
// 16 bytes a parameter / D plus the non-block tensors (wte, wpe, lnf) held whole with their
// gradients, against DP's 16 bytes a parameter (plus its bucket staging buffer).
TEST(DataParallel, Zero3MatchesDpOverFiftyStepsWithHalfTheModelState) {
  const fs::path dir = rank_dir("zero3");
  TrainConfig c = small_run(write_corpus(dir));
  c.model.num_layers = 4;
  c.model.channels = 128;
  c.steps = 50;
  c.warmup = 5;
  c.val_batches = 3;  // an odd count: ranks evaluate 2 and 1 batches, the gathers stay matched
  c.parallel.dp = 2;
  double dp_peak = 0, z3_peak = 0;
  auto run = [&](int zero, size_t* at_start) {
    TrainConfig z = c;
    z.parallel.zero = zero;
    Trainer t(z, world().split(0, world().rank(), CommGroup::kWorld));
    *at_start = t.allocator().stats().requested;  // bytes asked for, without block rounding
    RunResult r = train(t, z.steps);
    // The memory model's prediction of this rank's peak against the allocator's.
    const double predicted =
        static_cast<double>(tuner::predict_memory(z, tuner::ParallelLayout::of(z.parallel)).peak);
    const double measured = static_cast<double>(t.allocator().stats().peak_allocated);
    if (world().rank() == 0) {
      std::printf("zero %d peak: predicted %.0f measured %.0f (%+.1f%%)\n", zero, predicted,
                  measured, 100 * (predicted / measured - 1));
    }
    // Within issue 22's 2% (each tensor counted as the block the allocator holds for it; before
    // that, this small model read DP 17% and ZeRO-3 10% low); the measured peak must drop.
    EXPECT_LE(std::abs(predicted / measured - 1), 0.02) << "zero " << zero;
    (zero == 0 ? dp_peak : z3_peak) = measured;
    return r;
  };
  size_t dp_bytes = 0, z3_bytes = 0;
  const RunResult dp = run(0, &dp_bytes), z3 = run(3, &z3_bytes);
  EXPECT_LT(z3_peak, dp_peak);
  ASSERT_EQ(dp.loss.size(), 50u);
  double dl = 0;
  for (size_t i = 0; i < dp.loss.size(); ++i) dl = std::max(dl, rel(z3.loss[i], dp.loss[i]));
  const double ratio = static_cast<double>(z3_bytes) / static_cast<double>(dp_bytes);
  if (world().rank() == 0) {
    std::printf(
        "zero3 vs dp over 50 steps: max rel loss diff %.2e, val %.2e; model state %zu vs "
        "%zu bytes (%.3f)\n",
        dl, rel(z3.val, dp.val), z3_bytes, dp_bytes, ratio);
  }
  EXPECT_LT(dl, 1e-6);
  EXPECT_LT(rel(z3.val, dp.val), 1e-6);
  EXPECT_LT(dp.loss.back(), dp.loss.front());
  const ParamLayout pl = ParamLayout::make(c.model);
  const double non_block =
      static_cast<double>(pl.sizes[kWte] + pl.sizes[kWpe] + 2 * pl.sizes[kLnfw]);
  const double z3_model = 16.0 * pl.total / 2 + 8 * non_block;  // shards + whole non-block
  if (world().rank() == 0) {
    std::printf("zero3 model state: %zu bytes held, %.0f predicted; full model states %.0f\n",
                z3_bytes, z3_model, 16.0 * pl.total);
  }
  EXPECT_NEAR(static_cast<double>(z3_bytes), z3_model, 0.05 * z3_model);
  EXPECT_LT(static_cast<double>(z3_bytes), 0.55 * 16.0 * pl.total);
  EXPECT_GT(static_cast<double>(dp_bytes), 16.0 * pl.total);
}

// bf16 under ZeRO-3: the comm thread converts each gathered block for the bf16 GEMMs; the
// losses track plain DP in bf16 (the same operands, the same sums at K = 1).
TEST(DataParallel, Zero3Bf16MatchesDpBf16) {
  const fs::path dir = rank_dir("zero3_bf16");
  TrainConfig c = small_run(write_corpus(dir));
  c.options.precision = Precision::kBf16;
  c.parallel.dp = 2;
  auto run = [&](int zero) {
    TrainConfig z = c;
    z.parallel.zero = zero;
    Trainer t(z, world().split(0, world().rank(), CommGroup::kWorld));
    return train(t, z.steps);
  };
  const RunResult dp = run(0), z3 = run(3);
  double dl = 0;
  for (size_t i = 0; i < dp.loss.size(); ++i) dl = std::max(dl, rel(z3.loss[i], dp.loss[i]));
  if (world().rank() == 0) std::printf("zero3 bf16 vs dp bf16: max rel loss diff %.2e\n", dl);
  EXPECT_LT(dl, 1e-6);
  EXPECT_LT(dp.loss.back(), dp.loss.front());
}

}  // namespace
}  // namespace ft::trainer
