// gemm_probe_test.cpp: the bf16-over-fp32 GEMM probe an fp32 run measures before training.
#include "ft/app/gemm_probe.h"

#include <gtest/gtest.h>

#include "ft/trainer/matmul.h"

namespace {

ft::trainer::TrainConfig small_config() {
  ft::trainer::TrainConfig c;
  c.micro_batch = 4;
  c.seq_len = 32;
  c.model.channels = 64;
  return c;
}

// Either both precisions were timed and the ratio is theirs, or the reason is given (a CPU that
// emulates bf16 has no bf16 units to measure).
TEST(GemmProbe, TimesBothPrecisionsOrSaysWhyNot) {
  const ft::app::GemmSpeedup g = ft::app::measure_gemm_bf16_speedup(small_config(), 2);
  if (ft::trainer::Gemm::library_info().find("bf16 emulated") != std::string::npos) {
    EXPECT_EQ(g.ratio, 0);
    EXPECT_NE(g.why_not.find("emulated"), std::string::npos) << g.why_not;
    return;
  }
  ASSERT_TRUE(g.why_not.empty()) << g.why_not;
  EXPECT_GT(g.fp32_ms, 0);
  EXPECT_GT(g.bf16_ms, 0);
  EXPECT_DOUBLE_EQ(g.ratio, g.fp32_ms / g.bf16_ms);
  // The MLP's two layers at B*T = 128 rows, C = 64, 4C = 256.
  EXPECT_EQ(g.shapes, "(128,64)x(256,64)^T and (128,256)x(64,256)^T");
}

TEST(GemmProbe, OnlyForCpuRuns) {
  ft::trainer::TrainConfig c = small_config();
  c.device = ft::trainer::DeviceKind::kCuda;
  const ft::app::GemmSpeedup g = ft::app::measure_gemm_bf16_speedup(c);
  EXPECT_EQ(g.ratio, 0);
  EXPECT_EQ(g.why_not, "not a CPU run");
}

}  // namespace
