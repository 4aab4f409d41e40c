// tp_cli_test.cpp: `mpirun -np 2 ft-train --tp 2` end to end: same losses and exported llm.c model
// as one process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/trainer/checkpoint_io.h"
#include "ft/trainer/communicator.h"
#include "reference/run_cli.h"
#include "test_scratch.h"

namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  return ft::test::scratch_dir("ft_tp_cli_test_" + name);
}

std::vector<double> losses(const fs::path& metrics) {
  std::ifstream in(metrics);
  std::vector<double> out;
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

// mpirun as root needs these; ranks oversubscribe the 2 cores; 1 OpenMP thread per rank.
const std::string kMpirun =
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 mpirun -np 2 "
    "--oversubscribe ";

TEST(TpCli, MpirunTp2MatchesOneProcessAndExportsTheWholeModel) {
  if (!ft::trainer::mpi_supported()) GTEST_SKIP() << "built without MPI";
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  const fs::path d = temp_dir("run");
  std::string text;
  for (int i = 0; i < 400; ++i)
    text +=
        "In the beginning God created the heaven and the earth. " + std::to_string(i % 7) + "\n\n";
  ft::write_file_atomic(d / "c.txt", text);
  const std::string args = "--data " + (d / "c.txt").string() +
                           " --layers 2 --heads 4 --channels 64 --seq-len 32 --micro-batch 4 "
                           "--threads 1 --val-batches 2 --steps 8 --loader-workers 0 ";
  const auto one =
      ft::testing::run_cli("ft-train", args + "--metrics " + (d / "one.jsonl").string() +
                                           " --export-llmc " + (d / "one.bin").string());
  ASSERT_EQ(one.status, 0) << one.out;
  const std::string cmd = kMpirun + std::string(FT_BINARY_DIR) + "/ft-train " + args +
                          "--tp 2 --metrics " + (d / "tp.jsonl").string() + " --export-llmc " +
                          (d / "tp.bin").string() + " 2>&1";
  ft::testing::CliResult tp{0, ""};
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) tp.out.append(buf, n);
  const int st = pclose(p);
  tp.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  ASSERT_EQ(tp.status, 0) << tp.out;
  EXPECT_NE(tp.out.find("(tp 2:"), std::string::npos) << "the header states the per-rank share\n"
                                                      << tp.out;
  // Both TP ranks report the same loss; each writes its own metrics file.
  const auto lo = losses(d / "one.jsonl"), l0 = losses(d / "tp.rank0.jsonl"),
             l1 = losses(d / "tp.rank1.jsonl");
  ASSERT_EQ(lo.size(), 8u);
  ASSERT_EQ(l0.size(), 8u);
  ASSERT_EQ(l1, l0);
  double worst = 0;
  for (size_t i = 0; i < lo.size(); ++i) worst = std::max(worst, std::fabs(l0[i] - lo[i]));
  std::printf(
      "mpirun -np 2 ft-train --tp 2 vs ft-train over 8 steps: max |loss diff| %.3e (tolerance "
      "1e-5)\n",
      worst);
  EXPECT_LT(worst, 1e-5);
  // --export-llmc gathers the shards: the same whole model as one process writes.
  const auto mo = ft::trainer::read_llmc_model((d / "one.bin").string());
  const auto mt = ft::trainer::read_llmc_model((d / "tp.bin").string());
  ASSERT_EQ(mo.params.size(), mt.params.size());
  double maxdiff = 0, maxabs = 0;
  for (size_t i = 0; i < mo.params.size(); ++i) {
    maxdiff = std::max(maxdiff, static_cast<double>(std::fabs(mo.params[i] - mt.params[i])));
    maxabs = std::max(maxabs, static_cast<double>(std::fabs(mo.params[i])));
  }
  std::printf("exported params: max |diff| %.3e of max |param| %.3e (tolerance 1e-4 relative)\n",
              maxdiff, maxabs);
  EXPECT_LT(maxdiff, 1e-4 * maxabs);
  fs::remove_all(d);
}

}  // namespace
