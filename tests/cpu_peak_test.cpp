// cpu_peak_test.cpp: the MFU peak table matches the CPU kinds it names, and the probe agrees with
// it here.
#include "ft/trainer/cpu_peak.h"

#include <gtest/gtest.h>

namespace {
using ft::EnvInfo;
using ft::trainer::cpu_peak;
using ft::trainer::known_cpu;
using ft::trainer::Precision;
using ft::trainer::probe_fma_gflops_per_core;

EnvInfo zen5() {
  EnvInfo e;
  e.vendor = "AuthenticAMD";
  e.cpu_family = 26;
  e.avx512f = e.avx512_bf16 = true;
  return e;
}

TEST(CpuPeak, TableNamesZen5Zen4AndIntelAmxAndNothingElse) {
  ASSERT_NE(known_cpu(zen5()), nullptr);
  EXPECT_DOUBLE_EQ(known_cpu(zen5())->fp32_per_core, 268.0);
  EXPECT_DOUBLE_EQ(known_cpu(zen5())->bf16_per_core, 534.0);
  EnvInfo intel;
  intel.vendor = "GenuineIntel";
  intel.avx512f = intel.avx512_bf16 = intel.amx_bf16 = true;
  ASSERT_NE(known_cpu(intel), nullptr);
  EXPECT_DOUBLE_EQ(known_cpu(intel)->bf16_per_core, 2300.0);
  EnvInfo zen4 = zen5();
  zen4.cpu_family = 25;
  ASSERT_NE(known_cpu(zen4), nullptr);
  EXPECT_DOUBLE_EQ(known_cpu(zen4)->fp32_per_core, 117.4);
  EXPECT_DOUBLE_EQ(known_cpu(zen4)->bf16_per_core, 234.5);
  EnvInfo zen3 = zen4;  // family 25 without AVX-512
  zen3.avx512f = zen3.avx512_bf16 = false;
  EXPECT_EQ(known_cpu(zen3), nullptr);
  EnvInfo zen6 = zen5();
  zen6.cpu_family = 27;
  EXPECT_EQ(known_cpu(zen6), nullptr);
  intel.amx_bf16 = false;
  EXPECT_EQ(known_cpu(intel), nullptr);
}

TEST(CpuPeak, KnownCpuScalesByThreadsAndNamesItsSource) {
  const auto fp32 = cpu_peak(Precision::kFp32, 2, zen5());
  EXPECT_DOUBLE_EQ(fp32.gflops, 536.0);
  EXPECT_NE(fp32.source.find("AMD Zen 5"), std::string::npos) << fp32.source;
  const auto fp16 = cpu_peak(Precision::kFp16, 2, zen5());  // fp16 runs fp32 GEMMs
  EXPECT_DOUBLE_EQ(fp16.gflops, 536.0);
  const auto bf16 = cpu_peak(Precision::kBf16, 3, zen5());
  EXPECT_DOUBLE_EQ(bf16.gflops, 1602.0);
  EXPECT_NE(bf16.source.find("AVX512-BF16"), std::string::npos) << bf16.source;
}

TEST(CpuPeak, UnknownCpuIsProbedAndSaysSo) {
  EnvInfo unknown = zen5();
  unknown.vendor = "SomeVendor";
  unknown.cpu_model = "Mystery CPU";
  const auto p = cpu_peak(Precision::kFp32, 2, unknown);
  EXPECT_GT(p.gflops, 0.0);
  EXPECT_NE(p.source.find("probed at start-up"), std::string::npos) << p.source;
  EXPECT_NE(p.source.find("Mystery CPU"), std::string::npos) << p.source;
}

// The table is a statement about this machine kind: the probe of one core must not beat it by
// more than 30% (the probe can only read low under load, never high). A table left over from
// another CPU kind (bf16 at 87 GFLOP/s/core on Zen 5, where VDPBF16PS runs 470-524) fails here.
TEST(CpuPeak, ProbeDoesNotExceedTheTableOnThisMachine) {
  const EnvInfo env = ft::collect_env_info();
  const auto* cpu = known_cpu(env);
  if (cpu == nullptr) {  // nothing to hold against the probe: the peak must then come from it
    const auto p = cpu_peak(Precision::kFp32, 1, env);
    EXPECT_NE(p.source.find("probed at start-up"), std::string::npos) << p.source;
    EXPECT_GT(p.gflops, 0.0);
    return;
  }
  const double fp32 = probe_fma_gflops_per_core(false, 0.05);
  EXPECT_LE(fp32, 1.3 * cpu->fp32_per_core) << cpu->name;
  EXPECT_GT(fp32, 0.0);
  if (env.avx512_bf16 && !env.amx_bf16) {  // AMX is not probed; its table entry is fma_peak's
    const double bf16 = probe_fma_gflops_per_core(true, 0.05);
    EXPECT_LE(bf16, 1.3 * cpu->bf16_per_core) << cpu->name;
  }
  std::printf("probe: fp32 %.1f GFLOP/s per core (table %.1f, %s)\n", fp32, cpu->fp32_per_core,
              cpu->name);
}

}  // namespace
