// pipeline4_mpi_test.cpp: PP=4 (middle stages without wte) equals one process, m > p and m < p.
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

}  // namespace
}  // namespace ft::trainer
