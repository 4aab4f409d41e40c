// pipeline4_mpi_test.cpp: 4-rank layouts: PP=4 (middle stages without wte) equals one process, m > p
// and m < p; DP x PP, TP x PP and ZeRO x TP x DP against their references.
// FT_TEST_RANKS 4
#include <gtest/gtest.h>

#include "ft/trainer/pipeline.h"
#include "mpi/pipeline_test_util.h"

namespace ft::trainer {
namespace {

using namespace pipetest;

TrainConfig pp4(const fs::path& corpus, int layers, int micro) {
  TrainConfig c = tiny_run(corpus, layers, micro);
  c.parallel.pp = 4;
  c.steps = 6;
  return c;
}

TEST(Pipeline4Mpi, FourStagesEqualOneProcess) {
  const fs::path dir = temp_dir("pp4");
  const TrainConfig c = pp4(write_corpus(dir), 4, 6);
  Trainer t(c, make_world_communicator(60.0));
  const int stage = t.groups().pp_stage;
  EXPECT_EQ(t.model().first_layer(), stage);
  EXPECT_EQ(t.model().local_layers(), 1);
  const bool end = stage == 0 || stage == 3;
  EXPECT_EQ(t.model().layout().sizes[kWte] > 0, end);  // middle stages hold no embedding
  const RunResult pp = train(t);
  EXPECT_LE(max_loss_diff(pp, one_process(c), "PP=4 m=6 vs 1 process K=6", stage), kLossTol);
  fs::remove_all(dir);
}

TEST(Pipeline4Mpi, FewerMicroBatchesThanStages) {
  const fs::path dir = temp_dir("pp4_m2");
  TrainConfig c = pp4(write_corpus(dir), 5, 2);  // blocks 2 + 1 + 1 + 1
  c.options.checkpointing = Checkpointing::kBlock;
  Trainer t(c, make_world_communicator(60.0));
  const RunResult pp = train(t);
  EXPECT_LE(max_loss_diff(pp, one_process(c), "PP=4 m=2 --checkpoint block vs 1 process",
                          t.groups().pp_stage),
            kLossTol);
  fs::remove_all(dir);
}

// DP=2 x PP=2 on the 4 ranks against DP=2 alone (each half of the world runs it):
// whatever the DP data split, both runs use the same one.
TEST(Pipeline4Mpi, DataParallelTimesPipelineEqualsDataParallel) {
  const fs::path dir = temp_dir("dp2pp2");
  TrainConfig c = pp4(write_corpus(dir), 2, 3);
  c.parallel.pp = 2;
  c.parallel.dp = 2;
  auto w = make_world_communicator(60.0);
  const int rank = w->rank();
  RunResult both;
  {
    Trainer t(c, std::move(w));
    EXPECT_EQ(t.groups().dp->world_size(), 2);
    EXPECT_EQ(t.groups().pp->world_size(), 2);
    both = train(t);
  }
  TrainConfig dp = c;
  dp.parallel.pp = 1;
  auto world2 = make_world_communicator(60.0);
  auto half = world2->split(rank / 2, rank, CommGroup::kWorld);
  Trainer t(dp, std::move(half));
  const RunResult ref = train(t);
  EXPECT_LE(max_loss_diff(both, ref, "DP=2 x PP=2 m=3 vs DP=2 K=3", rank), kLossTol);
  fs::remove_all(dir);
}

// TP=2 x PP=2 on the 4 ranks (stage slices of the model, each sharded over its TP pair)
// against one process with the same micro-batches: losses, grad norms and validation.
TEST(Pipeline4Mpi, TensorTimesPipelineEqualsOneProcess) {
  const fs::path dir = temp_dir("tp2pp2");
  TrainConfig c = pp4(write_corpus(dir), 2, 2);
  c.parallel.pp = 2;
  c.parallel.tp = 2;
  auto w = make_world_communicator(60.0);
  const int rank = w->rank();
  RunResult both;
  {
    Trainer t(c, std::move(w));
    EXPECT_EQ(t.groups().tp->world_size(), 2);
    EXPECT_EQ(t.groups().pp->world_size(), 2);
    EXPECT_EQ(t.model().tp_size(), 2);
    both = train(t);
  }
  const RunResult ref = one_process(c);
  EXPECT_LE(max_loss_diff(both, ref, "TP=2 x PP=2 m=2 vs 1 process K=2", rank), kLossTol);
  EXPECT_NEAR(both.val, ref.val, kLossTol);
  fs::remove_all(dir);
}

// ZeRO-1, -2 and -3 over DP=2 x TP=2: each TP rank's local parameters are sharded over its DP
// pair (ZeRO-3: the units of its TP shard), and the global norm sums the TP-split tensors over the TP group and counts the
// replicated ones once. Against the same layout without ZeRO (itself checked against one
// process by the DP and TP tests): losses, grad norms (clipping depends on them) and validation.
TEST(Pipeline4Mpi, ZeroTimesTensorParallelEqualsPlainDataTimesTensorParallel) {
  const fs::path dir = temp_dir("zero_tp");
  TrainConfig c = pp4(write_corpus(dir), 2, 2);
  c.parallel.pp = 1;
  c.parallel.tp = 2;
  c.parallel.dp = 2;
  c.parallel.bucket_mb = 0.02;  // several buckets, so shard pieces span tensor boundaries
  RunResult ref;
  int rank = 0;
  {
    auto w = make_world_communicator(60.0);
    rank = w->rank();
    Trainer t(c, std::move(w));
    ref = train(t);
  }
  for (int zero : {1, 2, 3}) {
    TrainConfig z = c;
    z.parallel.zero = zero;
    auto w = make_world_communicator(60.0);
    Trainer t(z, std::move(w));
    EXPECT_EQ(t.groups().tp->world_size(), 2);
    EXPECT_EQ(t.groups().dp->world_size(), 2);
    const RunResult got = train(t);
    const std::string what = "ZeRO-" + std::to_string(zero) + " x TP=2 x DP=2 vs TP=2 x DP=2";
    EXPECT_LE(max_loss_diff(got, ref, what.c_str(), rank), kLossTol);
    ASSERT_EQ(got.norms.size(), ref.norms.size());
    for (size_t i = 0; i < got.norms.size(); ++i) {
      EXPECT_NEAR(got.norms[i], ref.norms[i], 1e-5 * ref.norms[i]) << what << " step " << i;
    }
    EXPECT_NEAR(got.val, ref.val, kLossTol);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ft::trainer
