// ft_data_test.cpp: 'ft-data tokenize' and 'ft-data stats' end to end (the built binary), and
// ft-train on the shards they write.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/trainer/data.h"
#include "ft/trainer/documents.h"
#include "ft/trainer/tokenizer_gpt2.h"

namespace ft::trainer::data {
namespace {

namespace fs = std::filesystem;

const std::string kGpt2 = std::string(FT_SOURCE_DIR) + "/tests/data/gpt2/";
const std::string kGpt2Flags =
    " --tokenizer gpt2 --vocab " + kGpt2 + "encoder.json.gz --merges " + kGpt2 + "vocab.bpe.gz ";

struct Result {
  int status;
  std::string out;
};

Result run(const std::string& binary, const std::string& args) {
  const std::string cmd = std::string(FT_BINARY_DIR) + "/" + binary + " " + args + " 2>&1";
  Result r{0, ""};
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

Result ft_data(const std::string& args) { return run("ft-data", args); }

const Gpt2Tokenizer& gpt2() {
  static const auto tok =
      Gpt2Tokenizer::from_files(kGpt2 + "encoder.json.gz", kGpt2 + "vocab.bpe.gz");
  return *tok;
}

class FtData : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ft_data_cli_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "in");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // 120 distinct documents: 100 text paragraphs (some non-ASCII) and 20 JSONL rows.
  std::vector<std::string> write_corpus() {
    std::string text;
    for (int i = 0; i < 100; ++i) {
      text += "Verse " + std::to_string(i) + ": And God said, Let there be light" +
              (i % 3 == 0 ? " \xC3\xA9t\xC3\xA9 \xD0\xBC\xD0\xB8\xD1\x80" : "") +
              ".\nLine two of " + std::to_string(i * 7) + "'s paragraph.\n\n";
    }
    write_file_atomic(dir_ / "in" / "a.txt", text);
    std::string jsonl;
    for (int i = 0; i < 20; ++i) {
      jsonl += nlohmann::json({{"text", "json document " + std::to_string(i) + " \xE2\x9C\x93"}})
                   .dump() +
               "\n";
    }
    write_file_atomic(dir_ / "in" / "b.jsonl", jsonl);
    std::vector<std::string> docs;
    for_each_document({dir_ / "in"}, [&](std::string_view t, const DocumentOrigin&) {
      docs.emplace_back(t);
      return true;
    });
    return docs;
  }

  std::vector<int32_t> read_split(const fs::path& out, const std::string& prefix) {
    std::vector<int32_t> all;
    for (int i = 0;; ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "%s_%06d.bin", prefix.c_str(), i);
      if (!fs::exists(out / name)) break;
      const auto s = open_llmc_shard(out / name);
      std::vector<int32_t> t(s->size());
      s->read(0, t.size(), t.data());
      all.insert(all.end(), t.begin(), t.end());
    }
    return all;
  }

  fs::path dir_;
};

// Splits a GPT-2 token stream at <|endoftext|> (which starts every document).
std::vector<std::string> documents_of(const std::vector<int32_t>& ids) {
  std::vector<std::string> docs;
  std::vector<int32_t> cur;
  for (size_t i = 0; i <= ids.size(); ++i) {
    if (i == ids.size() || ids[i] == 50256) {
      if (i > 0) docs.push_back(gpt2().decode(cur.data(), cur.size()));
      cur.clear();
    } else {
      cur.push_back(ids[i]);
    }
  }
  if (!ids.empty()) {
    EXPECT_EQ(ids[0], 50256) << "every document starts with <|endoftext|>";
  }
  return docs;
}

TEST_F(FtData, TokenizeGpt2SplitsByDocumentIntoShards) {
  const auto docs = write_corpus();
  ASSERT_EQ(docs.size(), 120u);
  const fs::path out = dir_ / "out";
  const Result r = ft_data("tokenize " + (dir_ / "in").string() + " --out " + out.string() +
                           kGpt2Flags + "--shard-tokens 500 --val-fraction 0.25 --threads 2");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto train = read_split(out, "train");
  const auto val = read_split(out, "val");
  const auto train_docs = documents_of(train);
  const auto val_docs = documents_of(val);
  // Every document lands whole in exactly one split, in input order.
  EXPECT_EQ(train_docs.size() + val_docs.size(), docs.size());
  EXPECT_GT(val_docs.size(), 10u);
  EXPECT_LT(val_docs.size(), 50u);
  size_t ti = 0, vi = 0;
  for (const auto& d : docs) {
    if (ti < train_docs.size() && train_docs[ti] == d) {
      ++ti;
    } else {
      ASSERT_LT(vi, val_docs.size());
      EXPECT_EQ(val_docs[vi], d);
      ++vi;
    }
  }
  EXPECT_EQ(ti, train_docs.size());
  EXPECT_EQ(vi, val_docs.size());
  // Ids are exactly the tokenizer's; shards hold 500 tokens except the last of each split.
  std::vector<int32_t> expect_train;
  for (const auto& d : train_docs) {
    expect_train.push_back(50256);
    gpt2().encode_append(d, expect_train);
  }
  EXPECT_EQ(train, expect_train);
  EXPECT_EQ(open_llmc_shard(out / "train_000000.bin")->size(), 500u);
  const auto meta = nlohmann::json::parse(read_file(out / "meta.json"));
  EXPECT_EQ(meta["tokenizer"]["name"], "gpt2");
  EXPECT_EQ(meta["tokenizer"]["vocab_size"], 50257);
  EXPECT_EQ(meta["shard_version"], 1);
  EXPECT_EQ(meta["train"]["documents"].get<size_t>(), train_docs.size());
  EXPECT_EQ(meta["val"]["documents"].get<size_t>(), val_docs.size());
  EXPECT_EQ(meta["train"]["tokens"].get<size_t>(), train.size());
  EXPECT_EQ(meta["train"]["shards"].size(), (train.size() + 499) / 500);
  EXPECT_EQ(meta["split"]["seed"], 0);
}

TEST_F(FtData, TokenizeIsDeterministicAcrossThreadsAndSeedChangesTheSplit) {
  write_corpus();
  const std::string in = (dir_ / "in").string();
  const std::string common = kGpt2Flags + "--val-fraction 0.3 --shard-tokens 300 ";
  ASSERT_EQ(ft_data("tokenize " + in + " --out " + (dir_ / "t1").string() + common + "--threads 1")
                .status,
            0);
  ASSERT_EQ(ft_data("tokenize " + in + " --out " + (dir_ / "t3").string() + common + "--threads 3")
                .status,
            0);
  ASSERT_EQ(
      ft_data("tokenize " + in + " --out " + (dir_ / "s7").string() + common + "--seed 7").status,
      0);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_ / "t1")) names.insert(e.path().filename());
  std::set<std::string> names3;
  for (const auto& e : fs::directory_iterator(dir_ / "t3")) names3.insert(e.path().filename());
  EXPECT_EQ(names, names3);
  for (const auto& n : names) {
    if (n == "meta.json") continue;
    EXPECT_EQ(read_file(dir_ / "t1" / n), read_file(dir_ / "t3" / n)) << n;
  }
  EXPECT_NE(read_split(dir_ / "t1", "val"), read_split(dir_ / "s7", "val"));
}

TEST_F(FtData, TokenizeByteAppendsBlankLineAndV7ForLargeVocab) {
  write_file_atomic(dir_ / "in" / "a.txt", "one\n\ntwo \xFF\n%\nthree\n");
  const fs::path out = dir_ / "out";
  Result r = ft_data("tokenize " + (dir_ / "in" / "a.txt").string() + " --out " + out.string() +
                     " --tokenizer byte --val-fraction 0");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto train = read_split(out, "train");
  EXPECT_EQ(ByteTokenizer().decode(train.data(), train.size()), "one\n\ntwo \xFF\n\nthree\n\n");
  EXPECT_FALSE(fs::exists(out / "val_000000.bin"));

  // A tokenizer.json whose <|endoftext|> has id 70000 needs uint32 (version 7) shards.
  nlohmann::json tj;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = gpt2_byte_to_unicode(static_cast<uint8_t>(b));
    std::string key;
    if (cp < 0x80) {
      key.push_back(static_cast<char>(cp));
    } else {
      key.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      key.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    tj["model"]["vocab"][key] = b;
  }
  tj["model"]["vocab"]["on"] = 256;
  tj["model"]["vocab"]["one"] = 257;
  tj["model"]["vocab"]["<|endoftext|>"] = 70000;
  tj["model"]["merges"] = nlohmann::json::array({"o n", "on e"});
  write_file_atomic(dir_ / "tok.json", tj.dump());
  r = ft_data("tokenize " + (dir_ / "in" / "a.txt").string() + " --out " + (dir_ / "v7").string() +
              " --tokenizer gpt2 --tokenizer-json " + (dir_ / "tok.json").string() +
              " --val-fraction 0");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto meta = nlohmann::json::parse(read_file(dir_ / "v7" / "meta.json"));
  EXPECT_EQ(meta["shard_version"], 7);
  const auto v7 = read_split(dir_ / "v7", "train");
  ASSERT_GE(v7.size(), 2u);
  EXPECT_EQ(v7[0], 70000);
  EXPECT_EQ(v7[1], 257);  // "one" is one token after merges "o n" (256) and "on e" (257)
  r = ft_data("stats " + (dir_ / "v7").string());
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("70000"), std::string::npos) << r.out;
}

TEST_F(FtData, TokenizeRejectsBadArgumentsClearly) {
  write_corpus();
  const std::string in = (dir_ / "in").string();
  Result r = ft_data("tokenize " + (dir_ / "missing").string() + " --out " + (dir_ / "o").string());
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("missing"), std::string::npos) << r.out;
  r = ft_data("tokenize " + in + " --out " + (dir_ / "o").string() + " --tokenizer gpt2");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--vocab"), std::string::npos) << r.out;
  r = ft_data("tokenize " + in + " --out " + (dir_ / "o").string() + " --val-fraction 1.5");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--val-fraction"), std::string::npos) << r.out;
  r = ft_data("tokenize " + in + " --out " + (dir_ / "o").string() + " --tokenizer gpt2 --vocab " +
              (dir_ / "nope.json").string() + " --merges x.bpe");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("nope.json"), std::string::npos) << r.out;
  r = ft_data("tokenize " + in);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--out"), std::string::npos) << r.out;
  // A second run into the same directory needs --force.
  ASSERT_EQ(ft_data("tokenize " + in + " --out " + (dir_ / "o").string()).status, 0);
  r = ft_data("tokenize " + in + " --out " + (dir_ / "o").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--force"), std::string::npos) << r.out;
  r = ft_data("tokenize " + in + " --out " + (dir_ / "o").string() +
              " --force --shard-tokens 100000");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "o" / "train_000001.bin"));
}

TEST_F(FtData, FtTrainTrainsOnGpt2Shards) {
  write_corpus();
  const fs::path out = dir_ / "out";
  ASSERT_EQ(ft_data("tokenize " + (dir_ / "in").string() + " --out " + out.string() + kGpt2Flags +
                    "--val-fraction 0.2")
                .status,
            0);
  const std::string model =
      " --layers 1 --heads 2 --channels 32 --seq-len 16 --micro-batch 2 --threads 2 "
      "--val-batches 1 --steps 2 --metrics " +
      (dir_ / "m.jsonl").string();
  Result r = run("ft-train", "--data " + out.string() + " --vocab 50257" + model);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("llm.c shards"), std::string::npos) << r.out;
  std::ifstream in(dir_ / "m.jsonl");
  std::string line, last;
  while (std::getline(in, line)) last = line;
  const auto summary = nlohmann::json::parse(last)["summary"];
  // Two steps from a random init: the loss is near ln(50257) = 10.8 and finite.
  EXPECT_NEAR(summary["val_loss"].get<double>(), 10.8, 0.5);
  r = run("ft-train", "--data " + out.string() + " --vocab 256" + model);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("50256"), std::string::npos) << r.out;
}

TEST_F(FtData, StatsOfDocumentsTableAndJson) {
  // Documents of 3, 8 and 6 bytes (a text document's last line end is part of its separator):
  // one invalid UTF-8 byte (0xFF) and one control byte (0x01).
  write_file_atomic(dir_ / "in" / "a.txt", "abc\n\n\xC3\xA9 x\xFF y\x01\n\n");
  write_file_atomic(dir_ / "in" / "b.jsonl", "{\"text\": \"l1\\nl2\\n\"}\n");
  const Result r = ft_data("stats " + (dir_ / "in").string() + " --tokenizer byte --json " +
                           (dir_ / "s.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("non-UTF-8 bytes"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(read_file(dir_ / "s.json"))["documents"];
  EXPECT_EQ(j["files"], 2);
  EXPECT_EQ(j["documents"], 3);
  EXPECT_EQ(j["bytes"], 3 + 8 + 6);
  EXPECT_EQ(j["lines"], 1 + 1 + 2);
  EXPECT_EQ(j["invalid_utf8_bytes"], 1);
  EXPECT_EQ(j["control_bytes"], 1);
  EXPECT_EQ(j["document_bytes"]["min"], 3);
  EXPECT_EQ(j["document_bytes"]["p50"], 6);
  EXPECT_EQ(j["document_bytes"]["max"], 8);
  EXPECT_NEAR(j["document_bytes"]["mean"].get<double>(), 17.0 / 3, 1e-9);
  EXPECT_EQ(j["tokens"]["tokens"], 17);  // byte tokenizer: one per byte

  const Result g = ft_data("stats " + (dir_ / "in" / "a.txt").string() + kGpt2Flags + "--json " +
                           (dir_ / "g.json").string());
  ASSERT_EQ(g.status, 0) << g.out;
  const auto gj = nlohmann::json::parse(read_file(dir_ / "g.json"))["documents"]["tokens"];
  EXPECT_EQ(gj["tokens"].get<size_t>(),
            gpt2().encode("abc").size() + gpt2().encode("\xC3\xA9 x\xFF y\x01").size());
}

// The quick look before cleaning: exact copies counted by content hash, near copies estimated
// from MinHash signatures (the first of each group is not a duplicate).
TEST_F(FtData, StatsReportsExactAndNearDuplicateRates) {
  static const char* kWords[] = {"light", "darkness", "waters", "firmament", "heaven", "earth",
                                 "seed",  "fruit",    "herb",   "creature",  "cattle", "fowl"};
  auto doc = [](uint32_t seed) {
    std::string s;
    uint32_t x = 2654435761u * (seed + 1);
    for (int w = 0; w < 150; ++w) {
      x = x * 1664525u + 1013904223u;
      if (w) s += ' ';
      s += kWords[(x >> 16) % 12];
    }
    return s;
  };
  std::string near = doc(2);
  near.replace(near.find(' ', 300), 1, " and ");  // one inserted word: J ~ 0.97
  const std::string text = doc(1) + "\n\n" + doc(2) + "\n\n" + doc(3) + "\n\n" + doc(1) + "\n\n" +
                           doc(3) + "\n\n" + near + "\n";
  write_file_atomic(dir_ / "dups.txt", text);
  Result r =
      ft_data("stats " + (dir_ / "dups.txt").string() + " --json " + (dir_ / "d.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("near duplicates"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(read_file(dir_ / "d.json"))["documents"]["duplicates"];
  EXPECT_EQ(j["exact_documents"], 2);
  EXPECT_EQ(j["near_documents_estimated"], 1);
  EXPECT_NEAR(j["exact_share"].get<double>(), 2.0 / 6, 1e-12);
  r = ft_data("stats " + (dir_ / "dups.txt").string() + " --no-dup-rates --json " +
              (dir_ / "n.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_FALSE(
      nlohmann::json::parse(read_file(dir_ / "n.json"))["documents"].contains("duplicates"));
  EXPECT_NE(ft_data("stats " + (dir_ / "dups.txt").string() + " --near-dup-threshold 2").status, 0);
}

// Writing systems: each document's dominant Unicode script, mixed-script documents, and
// documents without letters.
TEST_F(FtData, StatsReportsScripts) {
  write_file_atomic(dir_ / "scripts.txt",
                    "In the beginning God created the heaven\n\n"
                    "\xD0\x92 \xD0\xBD\xD0\xB0\xD1\x87\xD0\xB0\xD0\xBB\xD0\xB5\n\n"  // Cyrillic
                    "\xCE\x95\xCE\xBD \xCE\xB1\xCF\x81\xCF\x87\xCE\xB7\n\n"  // Greek
                    "Genesis \xD0\x91\xD1\x8B\xD1\x82\xD0\xB8\xD0\xB5\n\n"  // Latin + Cyrillic
                    "1 2 3 ...\n");
  const Result r = ft_data("stats " + (dir_ / "scripts.txt").string() + " --json " +
                           (dir_ / "sc.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("scripts (documents)"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(read_file(dir_ / "sc.json"))["documents"]["scripts"];
  EXPECT_EQ(j["dominant"]["Latin"], 1 + 1) << j.dump();  // the mixed one has 7 Latin letters
  EXPECT_EQ(j["dominant"]["Cyrillic"], 1) << j.dump();
  EXPECT_EQ(j["dominant"]["Greek"], 1) << j.dump();
  EXPECT_EQ(j["mixed_documents"], 1);
  EXPECT_EQ(j["no_letter_documents"], 1);
}

TEST_F(FtData, StatsOfShardsReportsHeadersAndErrors) {
  const fs::path d = dir_ / "shards";
  fs::create_directories(d);
  write_llmc_shard(d / "train_000000.bin", {1, 2, 300}, 1);
  write_llmc_shard(d / "train_000001.bin", {70000, 5}, 7);
  write_file_atomic(d / "val_000000.bin", "not a shard");
  Result r = ft_data("stats " + d.string() + " --json " + (dir_ / "s.json").string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("truncated"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(read_file(dir_ / "s.json"));
  ASSERT_EQ(j["shards"].size(), 3u);
  EXPECT_EQ(j["shards"][0]["version"], 1);
  EXPECT_EQ(j["shards"][0]["tokens"], 3);
  EXPECT_EQ(j["shards"][0]["max_id"], 300);
  EXPECT_EQ(j["shards"][1]["version"], 7);
  EXPECT_EQ(j["shards"][1]["max_id"], 70000);
  EXPECT_NE(j["shards"][2]["error"].get<std::string>().find("val_000000.bin"), std::string::npos);
  EXPECT_EQ(j["shard_totals"]["tokens"], 5);
  EXPECT_EQ(j["shard_totals"]["bad"], 1);
  fs::remove(d / "val_000000.bin");
  r = ft_data("stats " + (d / "train_000000.bin").string() + " --vocab-size 256");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("token 300 at position 2"), std::string::npos) << r.out;
  EXPECT_EQ(ft_data("stats " + d.string() + " --vocab-size 70001").status, 0);
}

}  // namespace
}  // namespace ft::trainer::data
