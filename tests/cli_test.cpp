// cli_test.cpp: ft-train end to end: per-step JSONL metrics, config files, llm.c export/import, clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/core/atomic_file.h"

#include "reference/run_cli.h"
#include "test_scratch.h"

namespace {

namespace fs = std::filesystem;

using Result = ft::testing::CliResult;

Result run(const std::string& args) { return ft::testing::run_cli("ft-train", args); }

fs::path temp_dir(const std::string& name) {
  return ft::test::scratch_dir("ft_cli_test_" + name);
}

fs::path corpus(const fs::path& dir) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "In the beginning God created the heaven and the earth. " + std::to_string(i % 7) + "\n\n";
  ft::write_file_atomic(dir / "c.txt", text);
  return dir / "c.txt";
}

const std::string kSmall = " --layers 2 --heads 2 --channels 32 --seq-len 32 --micro-batch 4 --threads 2 --val-batches 2 ";

TEST(Cli, MetricsJsonlHasEveryStepAndASummary) {
  const fs::path d = temp_dir("metrics");
  Result r = run("--data " + corpus(d).string() + kSmall + "--steps 5 --metrics " + (d / "m.jsonl").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("oneDNN"), std::string::npos) << "header names the GEMM library";
  EXPECT_NE(r.out.find("OPENBLAS_CORETYPE"), std::string::npos) << "header names the core type";
  EXPECT_NE(r.out.find("threads 2"), std::string::npos);
  std::ifstream in(d / "m.jsonl");
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 6u);
  for (int i = 0; i < 5; ++i) {
    for (const char* k : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu", "mem_allocated", "mem_reserved", "mem_peak"}) {
      EXPECT_TRUE(lines[i].contains(k)) << "line " << i << " lacks " << k;
    }
    EXPECT_EQ(lines[i]["step"], i);
    EXPECT_GT(lines[i]["tokens_per_s"].get<double>(), 0);
  }
  const auto& s = lines[5]["summary"];
  EXPECT_GT(s["mean_tokens_per_s"].get<double>(), 0);
  EXPECT_TRUE(s["val_loss"].is_number());
  fs::remove_all(d);
}

TEST(Cli, ConfigFileAndFlagsCombine) {
  const fs::path d = temp_dir("config");
  ft::write_file_atomic(d / "run.cfg", "layers = 1\nheads = 2\nchannels = 32\nseq-len = 16\nsteps = 2\n");
  Result r = run("--config " + (d / "run.cfg").string() + " --data " + corpus(d).string() + " --micro-batch 2 --threads 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("L1 NH2 C32"), std::string::npos) << r.out;
  fs::remove_all(d);
}

TEST(Cli, BadInputIsAClearErrorWithExitCode) {
  Result r = run("--precision fp8");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("unknown precision 'fp8'"), std::string::npos) << r.out;
  r = run("--heads 3 --channels 32");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("multiple of heads"), std::string::npos) << r.out;
  r = run("--no-such-flag");
  EXPECT_EQ(r.status, 2);
  r = run("--data /nonexistent/path.txt --steps 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("/nonexistent/path.txt"), std::string::npos) << r.out;
  r = run("--config /nonexistent.cfg");
  EXPECT_EQ(r.status, 2);
}

TEST(Cli, ValDataReplacesTheHeldOutSplit) {
  const fs::path d = temp_dir("valdata");
  // Held-out text unlike the training corpus: its loss must differ from the split's.
  std::string held_out;
  for (int i = 0; i < 50; ++i) held_out += "zqxj vvkk 0192 ##@@ " + std::to_string(i) + "\n\n";
  ft::write_file_atomic(d / "held_out.txt", held_out);
  const std::string common = "--data " + corpus(d).string() + kSmall + "--steps 3 --seed 7 ";
  Result a = run(common + "--metrics " + (d / "a.jsonl").string());
  Result b = run(common + "--val-data " + (d / "held_out.txt").string() + " --metrics " +
                 (d / "b.jsonl").string());
  ASSERT_EQ(a.status, 0) << a.out;
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_NE(b.out.find("validation: all of"), std::string::npos) << b.out;
  auto summary = [](const fs::path& p) {
    std::ifstream in(p);
    std::string line, last;
    while (std::getline(in, line)) last = line;
    return nlohmann::json::parse(last)["summary"];
  };
  const auto sa = summary(d / "a.jsonl"), sb = summary(d / "b.jsonl");
  EXPECT_DOUBLE_EQ(sa["final_loss"].get<double>(), sb["final_loss"].get<double>())
      << "training is unchanged by --val-data";
  EXPECT_GT(std::abs(sa["val_loss"].get<double>() - sb["val_loss"].get<double>()), 1e-3)
      << "validation ran on the held-out file";
  Result missing = run(common + "--val-data /nonexistent/held_out.txt");
  EXPECT_NE(missing.status, 0);
  EXPECT_NE(missing.out.find("/nonexistent/held_out.txt"), std::string::npos) << missing.out;
  fs::remove_all(d);
}

TEST(Cli, Gpt2TokenizerOnTextData) {
  const fs::path d = temp_dir("gpt2tok");
  const std::string gpt2 = std::string(FT_SOURCE_DIR) + "/tests/data/gpt2/";
  const std::string tok = " --tokenizer gpt2 --tokenizer-vocab " + gpt2 + "encoder.json.gz" +
                          " --tokenizer-merges " + gpt2 + "vocab.bpe.gz ";
  const std::string model = " --layers 1 --heads 2 --channels 32 --seq-len 16 --micro-batch 2 --threads 1 --val-batches 1 ";
  Result r = run("--data " + corpus(d).string() + tok + model + "--vocab 50257 --steps 2");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("(gpt2)"), std::string::npos) << r.out;
  // Byte-level vocabulary with GPT-2 ids: a clear error naming an id.
  r = run("--data " + corpus(d).string() + tok + model + "--vocab 256 --steps 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("256"), std::string::npos) << r.out;
  r = run("--data " + corpus(d).string() + " --tokenizer gpt2 --tokenizer-vocab /nonexistent/encoder.json --tokenizer-merges /nonexistent/vocab.bpe" + model + "--vocab 50257 --steps 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("/nonexistent/encoder.json"), std::string::npos) << r.out;
  fs::remove_all(d);
}

TEST(Cli, LlmcExportThenImportReproducesTheModel) {
  const fs::path d = temp_dir("llmc");
  const std::string data = " --data " + corpus(d).string();
  Result a = run(data + kSmall + "--steps 3 --export-llmc " + (d / "model.bin").string() + " --metrics " + (d / "a.jsonl").string());
  ASSERT_EQ(a.status, 0) << a.out;
  // Zero learning rate: the imported weights are evaluated unchanged.
  Result b = run(data + kSmall + "--steps 1 --lr 1e-30 --min-lr 0 --weight-decay 0 --init-from " + (d / "model.bin").string() +
                 " --metrics " + (d / "b.jsonl").string());
  ASSERT_EQ(b.status, 0) << b.out;
  auto summary = [](const fs::path& p) {
    std::ifstream in(p);
    std::string line, last;
    while (std::getline(in, line)) last = line;
    return nlohmann::json::parse(last)["summary"];
  };
  const double va = summary(d / "a.jsonl")["val_loss"], vb = summary(d / "b.jsonl")["val_loss"];
  std::printf("val loss after export %.7f, after import %.7f\n", va, vb);
  EXPECT_NEAR(va, vb, 1e-5);
  // A model of another shape is refused.
  Result c = run(data + " --layers 3 --heads 2 --channels 32 --seq-len 32 --steps 1 --init-from " + (d / "model.bin").string());
  EXPECT_EQ(c.status, 2) << c.out;
  fs::remove_all(d);
}

TEST(Cli, StopSaveAndResumeReproduceTheFullRun) {
  const fs::path d = temp_dir("resume");
  const std::string base = " --data " + corpus(d).string() + kSmall + "--steps 6 ";
  auto losses = [](const fs::path& p) {
    std::ifstream in(p);
    std::string line;
    std::vector<double> out;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) out.push_back(j["loss"]);
    }
    return out;
  };
  Result full = run(base + "--metrics " + (d / "full.jsonl").string());
  ASSERT_EQ(full.status, 0) << full.out;
  Result part = run(base + "--stop-after 3 --save " + (d / "ck").string() + " --metrics " + (d / "a.jsonl").string());
  ASSERT_EQ(part.status, 0) << part.out;
  Result rest = run(base + "--resume " + (d / "ck").string() + " --metrics " + (d / "b.jsonl").string());
  ASSERT_EQ(rest.status, 0) << rest.out;
  auto f = losses(d / "full.jsonl"), a = losses(d / "a.jsonl"), b = losses(d / "b.jsonl");
  ASSERT_EQ(f.size(), 6u);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  a.insert(a.end(), b.begin(), b.end());
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(f[i], a[i]) << "step " << i;  // bitwise
  fs::remove_all(d);
}

TEST(Cli, LossesAreIdenticalWhateverTheLoaderWorkers) {
  const fs::path d = temp_dir("workers");
  const std::string base = " --data " + corpus(d).string() + kSmall + "--steps 4 --grad-accum 2 --preprocess-cost 3 ";
  auto read = [](const fs::path& p) {
    std::ifstream in(p);
    std::string line;
    std::vector<nlohmann::json> out;
    while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
    return out;
  };
  std::vector<std::vector<double>> losses;
  for (const char* w : {"0", "1", "3"}) {
    const fs::path m = d / (std::string("m") + w + ".jsonl");
    Result r = run(base + "--loader-workers " + w + " --prefetch 1 --metrics " + m.string());
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find(std::string("loader workers ") + w + "  prefetch 1"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("loader: waited"), std::string::npos) << r.out;
    std::vector<double> l;
    for (const auto& j : read(m)) {
      if (j.contains("summary")) {
        EXPECT_GE(j["summary"]["data_wait_share"].get<double>(), 0.0);
        continue;
      }
      l.push_back(j["loss"]);
      EXPECT_GE(j["data_wait_ms"].get<double>(), 0.0);
      EXPECT_GT(j["data_preprocess_ms"].get<double>(), 0.0) << "preprocessing is measured";
    }
    ASSERT_EQ(l.size(), 4u);
    losses.push_back(l);
  }
  for (size_t i = 1; i < losses.size(); ++i) {
    for (size_t s = 0; s < 4; ++s) EXPECT_EQ(losses[0][s], losses[i][s]) << "run " << i << " step " << s;  // bitwise
  }
  Result bad = run(base + "--loader-workers -1");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("--loader-workers"), std::string::npos) << bad.out;
  bad = run(base + "--prefetch 0");
  EXPECT_EQ(bad.status, 2) << bad.out;
  fs::remove_all(d);
}

TEST(Cli, CtrlCStopsATrainingRunWithLoaderWorkersCleanly) {
  const fs::path d = temp_dir("sigint");
  const fs::path m = d / "m.jsonl";
  // SIGINT once the first step is logged; `timeout` turns a hang into exit status 124.
  const std::string cmd = "sh -c '" + std::string(FT_BINARY_DIR) + "/ft-train --data " + corpus(d).string() + kSmall +
                          "--steps 100000 --loader-workers 3 --prefetch 2 --preprocess-cost 50 --metrics " + m.string() +
                          " --save " + (d / "ck").string() + " > " + (d / "out.txt").string() +
                          " 2>&1 & pid=$!; i=0; while [ ! -s " + m.string() +
                          " ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; kill -INT $pid; "
                          "wait $pid; echo rc=$?'";
  Result r{0, ""};
  FILE* p = popen(("timeout 120 " + cmd).c_str(), "r");
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  pclose(p);
  EXPECT_NE(r.out.find("rc=130"), std::string::npos) << r.out;
  std::ifstream in(d / "out.txt");
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(out.find("interrupted after step"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(d / "ck" / "checkpoint.ft")) << "the checkpoint is written on the way out";
  fs::remove_all(d);
}

}  // namespace
