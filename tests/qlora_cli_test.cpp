// qlora_cli_test.cpp: ft-train --qlora end to end: fine-tuning a pretrained model on another
// corpus, adapter-only save and bit-identical resume, the merged export, and clear refusals.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "ft/core/atomic_file.h"
#include "reference/run_cli.h"
#include "test_scratch.h"

namespace {

namespace fs = std::filesystem;
using Result = ft::testing::CliResult;

Result run(const std::string& args) { return ft::testing::run_cli("ft-train", args); }

// Corpus A (pretraining): scripture-like prose. Corpus B (fine-tuning): arithmetic lines, whose
// bytes and structure A never shows.
fs::path corpus_a(const fs::path& dir) {
  std::string t;
  for (int i = 0; i < 300; ++i) {
    t += "And the LORD spake unto Moses, saying, Speak unto the children of Israel. " +
         std::to_string(i % 5) + "\n\n";
  }
  ft::write_file_atomic(dir / "a.txt", t);
  return dir / "a.txt";
}
fs::path corpus_b(const fs::path& dir) {
  std::string t;
  for (int i = 0; i < 600; ++i) {
    const int x = (i * 37) % 50, y = (i * 11) % 40;
    t += std::to_string(x) + " + " + std::to_string(y) + " = " + std::to_string(x + y) + ";\n\n";
  }
  ft::write_file_atomic(dir / "b.txt", t);
  return dir / "b.txt";
}

const std::string kModel =
    " --layers 2 --heads 2 --channels 32 --seq-len 32 --micro-batch 8 --threads 2 --val-batches 4 ";

std::vector<nlohmann::json> jsonl(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::vector<nlohmann::json> out;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}
double val_loss(const fs::path& p) { return jsonl(p).back()["summary"]["val_loss"]; }
std::vector<double> losses(const fs::path& p) {
  std::vector<double> out;
  for (const auto& j : jsonl(p))
    if (j.contains("loss")) out.push_back(j["loss"]);
  return out;
}

// A model pretrained on corpus A, exported in llm.c format.
fs::path pretrained(const fs::path& d) {
  const fs::path model = d / "base.bin";
  Result r = run("--data " + corpus_a(d).string() + kModel +
                 "--steps 40 --lr 3e-3 --warmup 5 --quiet --export-llmc " + model.string());
  EXPECT_EQ(r.status, 0) << r.out;
  return model;
}

TEST(Qlora, FineTuningOnAnotherCorpusLowersItsValidationLoss) {
  const fs::path d = ft::test::scratch_dir("ft_qlora_finetune");
  const fs::path base = pretrained(d);
  const std::string ft = "--data " + corpus_b(d).string() + kModel + "--init-from " +
                         base.string() + " --qlora --lora-rank 4 --lora-alpha 8 ";
  // Before: the quantized base with its zero-initialised adapters, evaluated unchanged.
  Result before = run(ft + "--steps 1 --lr 1e-30 --min-lr 0 --metrics " + (d / "0.jsonl").string());
  ASSERT_EQ(before.status, 0) << before.out;
  Result after =
      run(ft + "--steps 60 --lr 3e-3 --warmup 5 --quiet --metrics " + (d / "1.jsonl").string());
  ASSERT_EQ(after.status, 0) << after.out;
  const double v0 = val_loss(d / "0.jsonl"), v1 = val_loss(d / "1.jsonl");
  std::printf("corpus B val loss: base %.4f, after QLoRA %.4f\n", v0, v1);
  EXPECT_LT(v1, v0 - 0.3);
  // The header states the model state against full fine-tuning's 16 bytes per parameter.
  std::smatch m;
  const std::string out = before.out;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(\(([0-9.]+)x less\))"))) << out;
  EXPECT_GE(std::stod(m[1]), 3.0) << out;
  fs::remove_all(d);
}

TEST(Qlora, AdaptersResumeBitIdenticallyAndTheMergedModelIsTheSameFunction) {
  const fs::path d = ft::test::scratch_dir("ft_qlora_resume");
  const fs::path base = pretrained(d);
  const std::string b = corpus_b(d).string();
  const std::string ft = "--data " + b + kModel + "--init-from " + base.string() +
                         " --qlora --lora-rank 4 --lora-dropout 0.1 --steps 8 --lr 3e-3 --quiet ";
  Result full = run(ft + "--metrics " + (d / "full.jsonl").string() + " --merge-lora " +
                    (d / "merged").string());
  ASSERT_EQ(full.status, 0) << full.out;
  ASSERT_EQ(run(ft + "--stop-after 4 --save " + (d / "ck").string() + " --metrics " +
                (d / "p1.jsonl").string())
                .status,
            0);
  // The adapters alone: no full checkpoint beside them.
  EXPECT_TRUE(fs::exists(d / "ck" / "adapters.ft"));
  EXPECT_FALSE(fs::exists(d / "ck" / "checkpoint.ft"));
  ASSERT_EQ(run(ft + "--resume " + (d / "ck").string() + " --metrics " + (d / "p2.jsonl").string())
                .status,
            0);
  std::vector<double> joined = losses(d / "p1.jsonl");
  for (double l : losses(d / "p2.jsonl")) joined.push_back(l);
  EXPECT_EQ(joined, losses(d / "full.jsonl"));  // bit-identical, dropout masks included
  // The merged model, as llm.c and as an ft checkpoint, evaluates to the adapted model's loss.
  const double adapted = val_loss(d / "full.jsonl");
  const std::string eval = "--data " + b + kModel + "--steps 1 --lr 1e-30 --min-lr 0 --quiet ";
  ASSERT_EQ(run(eval + "--init-from " + (d / "merged" / "model.bin").string() + " --metrics " +
                (d / "m1.jsonl").string())
                .status,
            0);
  EXPECT_NEAR(val_loss(d / "m1.jsonl"), adapted, 1e-5);
  ASSERT_EQ(
      run(eval + "--resume " + (d / "merged").string() + " --metrics " + (d / "m2.jsonl").string())
          .status,
      0);
  EXPECT_NEAR(val_loss(d / "m2.jsonl"), adapted, 1e-5);
  // Adapters of another rank are refused by name.
  Result wrong = run("--data " + b + kModel + "--init-from " + base.string() +
                     " --qlora --lora-rank 8 --steps 8 --resume " + (d / "ck").string());
  EXPECT_EQ(wrong.status, 2) << wrong.out;
  EXPECT_NE(wrong.out.find("rank 4"), std::string::npos) << wrong.out;
  // A full checkpoint is not a set of adapters.
  Result notlora = run("--data " + b + kModel + "--init-from " + base.string() +
                       " --qlora --lora-rank 4 --steps 8 --resume " + (d / "merged").string());
  EXPECT_EQ(notlora.status, 2) << notlora.out;
  EXPECT_NE(notlora.out.find("full checkpoint"), std::string::npos) << notlora.out;
  fs::remove_all(d);
}

TEST(Qlora, RefusesWhatItCannotRun) {
  const fs::path d = ft::test::scratch_dir("ft_qlora_refuse");
  const std::string data = "--data " + corpus_b(d).string() + kModel + "--steps 1 ";
  const struct {
    std::string args, says;
  } cases[] = {
      {"--qlora", "--init-from"},
      {"--lora-rank 4", "needs --qlora"},
      {"--merge-lora " + (d / "m").string(), "needs --qlora"},
      {"--qlora --init-from x.bin --precision fp16", "fp32 or bf16"},
      {"--qlora --init-from x.bin --lora-targets attn,ffn", "ffn"},
      {"--qlora --init-from x.bin --lora-dropout 1", "--lora-dropout"},
  };
  for (const auto& c : cases) {
    Result r = run(data + c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << "\n" << r.out;
  }
  fs::remove_all(d);
}

}  // namespace
