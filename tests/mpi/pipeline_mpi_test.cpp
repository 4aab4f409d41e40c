// pipeline_mpi_test.cpp: PP=2 equals one process (fp32, bf16, recompute); tied wte, resume, errors.
// FT_TEST_RANKS 2
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "ft/core/annotate.h"
#include "ft/core/error.h"
#include "ft/trainer/pipeline.h"
#include "mpi/pipeline_test_util.h"

namespace ft::trainer {
namespace {

using namespace pipetest;

std::unique_ptr<Communicator> world() { return make_world_communicator(60.0); }

TrainConfig pp2(const fs::path& corpus, int layers, int micro) {
  TrainConfig c = tiny_run(corpus, layers, micro);
  c.parallel.pp = 2;
  return c;
}

TEST(PipelineMpi, TwoStagesWithFourMicroBatchesEqualOneProcess) {
  const fs::path dir = temp_dir("pp2");
  const TrainConfig c = pp2(write_corpus(dir), 2, 4);
  Trainer t(c, world());
  const int stage = t.groups().pp_stage;
  ASSERT_NE(t.pipeline(), nullptr);
  EXPECT_EQ(t.model().local_layers(), 1);
  EXPECT_EQ(t.model().first_layer(), stage);
  const RunResult pp = train(t);
  const RunResult ref = one_process(c);
  EXPECT_LE(max_loss_diff(pp, ref, "PP=2 m=4 vs 1 process K=4", stage), kLossTol);
  EXPECT_NEAR(pp.val, ref.val, kLossTol);
  EXPECT_LT(pp.losses.back(), pp.losses.front() - 0.5);  // it trains
  // Every stage reports the same loss (the last stage's, all-reduced).
  double mine = pp.losses.back(), other = mine;
  auto w = world();
  w->broadcast(reinterpret_cast<float*>(&other), 2, 1);  // 8 bytes of the double, from stage 1
  EXPECT_EQ(std::memcmp(&mine, &other, sizeof mine), 0);
  fs::remove_all(dir);
}

TEST(PipelineMpi, BlockRecomputeAndOddSplitEqualOneProcess) {
  const fs::path dir = temp_dir("pp2_block");
  TrainConfig c = pp2(write_corpus(dir), 3, 3);  // blocks 2 + 1
  c.options.checkpointing = Checkpointing::kBlock;
  c.steps = 6;
  Trainer t(c, world());
  EXPECT_EQ(t.model().local_layers(), t.groups().pp_stage == 0 ? 2 : 1);
  const RunResult pp = train(t);
  TrainConfig plain = c;
  plain.options.checkpointing = Checkpointing::kNone;  // recompute is exact: same reference
  const RunResult ref = one_process(plain);
  EXPECT_LE(max_loss_diff(pp, ref, "PP=2 m=3 --checkpoint block vs 1 process", t.groups().pp_stage),
            kLossTol);
  fs::remove_all(dir);
}

TEST(PipelineMpi, Bf16EqualsOneProcessBf16) {
  const fs::path dir = temp_dir("pp2_bf16");
  TrainConfig c = pp2(write_corpus(dir), 2, 2);
  c.options.precision = Precision::kBf16;
  c.steps = 6;
  Trainer t(c, world());
  const RunResult pp = train(t);
  const RunResult ref = one_process(c);
  EXPECT_LE(max_loss_diff(pp, ref, "PP=2 bf16 vs 1 process bf16", t.groups().pp_stage),
            kBf16LossTol);
  fs::remove_all(dir);
}

TEST(PipelineMpi, TiedEmbeddingCopiesStayIdentical) {
  const fs::path dir = temp_dir("pp2_wte");
  TrainConfig c = pp2(write_corpus(dir), 2, 1);  // m = 1: the largest bubble
  c.steps = 5;
  Trainer t(c, world());
  train(t);
  GptModel& m = t.model();
  const size_t n = m.layout().sizes[kWte];
  ASSERT_EQ(n, static_cast<size_t>(c.model.padded_vocab) * c.model.channels);
  Communicator& pp = *t.groups().pp;
  std::vector<float> other(n);
  // Stage 0 sends its wte to stage 1; stage 1 sends back, so both compare.
  if (pp.rank() == 0) {
    pp.send(m.param(kWte), n, 1, 5);
    pp.recv(other.data(), n, 1, 6);
  } else {
    pp.recv(other.data(), n, 0, 5);
    pp.send(m.param(kWte), n, 0, 6);
  }
  EXPECT_EQ(std::memcmp(other.data(), m.param(kWte), n * sizeof(float)), 0)
      << "the first and last stage's copies of the tied embedding diverged";
  // The gradients they applied were summed: identical too.
  if (pp.rank() == 0) {
    pp.send(m.grad(kWte), n, 1, 7);
  } else {
    pp.recv(other.data(), n, 0, 7);
    EXPECT_EQ(std::memcmp(other.data(), m.grad(kWte), n * sizeof(float)), 0);
  }
  fs::remove_all(dir);
}

TEST(PipelineMpi, ResumeEqualsUninterrupted) {
  const fs::path dir = temp_dir("pp2_resume");
  TrainConfig c = pp2(write_corpus(dir), 2, 2);
  c.steps = 6;
  std::vector<double> whole, parts;
  // A multi-rank checkpoint is one directory shared by the ranks (rank 0's pid names it):
  // parallel.json, written by rank 0, marks it complete for every rank.
  auto w = world();
  const double pid = static_cast<double>(::getpid());
  std::vector<double> pids(static_cast<size_t>(w->world_size()));
  w->all_gather(&pid, pids.data(), 1);
  const fs::path ckpt = fs::temp_directory_path() /
                        ("ft_pipeline_test_ckpt_" + std::to_string(static_cast<long>(pids[0])));
  {
    Trainer t(c, world());
    whole = train(t).losses;
  }
  {
    Trainer t(c, world());
    parts = train(t, 3).losses;
    t.save((ckpt).string());
  }
  const int rank = world()->rank();
  EXPECT_TRUE(fs::exists(ckpt / ("rank" + std::to_string(rank)) / "checkpoint.ft"));
  TrainConfig r = c;
  r.resume_dir = (ckpt).string();
  {
    Trainer t(r, world());
    EXPECT_EQ(t.next_step(), 3);
    for (double l : train(t).losses) parts.push_back(l);
  }
  ASSERT_EQ(parts.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_EQ(parts[i], whole[i]) << "step " << i;
  // The stages' checkpoints are refused by a run of another layout (DP=2: whole models).
  TrainConfig odd = r;
  odd.parallel.pp = 1;
  odd.parallel.dp = 2;
  try {
    Trainer t(odd, world());
    ADD_FAILURE() << "a stage checkpoint was loaded into a whole model";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--pp"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
  w->barrier();
  if (w->rank() == 0) fs::remove_all(ckpt);
}

// Records the "pp.*" ranges (any thread; the send threads emit "comm.send").
class PipeRanges : public RangeSink {
 public:
  void begin(const char* name, RangeKind kind, int64_t arg) noexcept override {
    if (std::strncmp(name, "pp.", 3) != 0) return;
    std::lock_guard<std::mutex> lk(mu_);
    seen_.push_back(std::string(name) + " " + std::to_string(arg) +
                    (kind == RangeKind::kCompute ? "" : " (not compute)"));
  }
  void end(const char*, RangeKind) noexcept override {}
  std::vector<std::string> seen() {
    std::lock_guard<std::mutex> lk(mu_);
    return seen_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> seen_;
};

TEST(PipelineMpi, RangesFollowTheOneFOneBOrder) {
  const fs::path dir = temp_dir("pp2_ranges");
  TrainConfig c = pp2(write_corpus(dir), 2, 4);
  c.steps = 1;
  Trainer t(c, world());
  PipeRanges sink;
  set_range_sink(&sink);
  t.step();
  set_range_sink(nullptr);
  // Stage 0: one warm-up forward; stage 1 (last): forward, backward alternate.
  const std::vector<std::string> want =
      t.groups().pp_stage == 0
          ? std::vector<std::string>{"pp.forward 0",  "pp.forward 1",  "pp.backward 0",
                                     "pp.forward 2",  "pp.backward 1", "pp.forward 3",
                                     "pp.backward 2", "pp.backward 3"}
          : std::vector<std::string>{"pp.forward 0",  "pp.backward 0", "pp.forward 1",
                                     "pp.backward 1", "pp.forward 2",  "pp.backward 2",
                                     "pp.forward 3",  "pp.backward 3"};
  EXPECT_EQ(sink.seen(), want);
  const PipelineStats& st = t.pipeline()->stats();
  EXPECT_EQ(st.micro_batches, 4);
  EXPECT_GT(st.busy_ms, 0);
  EXPECT_GE(st.wait_ms, 0);
  EXPECT_LE(st.busy_ms + st.wait_ms, st.wall_ms * 1.0001);
  fs::remove_all(dir);
}

TEST(PipelineMpi, FewerLayersThanStagesIsAClearError) {
  const fs::path dir = temp_dir("pp2_bad");
  const TrainConfig c = pp2(write_corpus(dir), 1, 2);
  try {
    Trainer t(c, world());
    FAIL() << "a 1-layer model cannot have 2 stages";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--pp 2"), std::string::npos) << what;
    EXPECT_NE(what.find("--layers 1"), std::string::npos) << what;
  }
  TrainConfig exp = pp2(dir / "corpus.txt", 2, 2);
  exp.export_llmc = (dir / "model.bin").string();
  EXPECT_THROW(Trainer(exp, world()), ConfigError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ft::trainer
