// tokenizer_gpt2_test.cpp: GPT-2 BPE against golden ids from two JS implementations, round trips,
// files.
#include "ft/trainer/tokenizer_gpt2.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"

namespace ft::trainer::data {
namespace {

namespace fs = std::filesystem;

const fs::path kGpt2Dir = fs::path(FT_SOURCE_DIR) / "tests" / "data" / "gpt2";

std::string gunzip(const fs::path& p) {
  gzFile f = gzopen(p.c_str(), "rb");
  EXPECT_NE(f, nullptr) << p;
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return out;
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// Loaded once for the whole file (parsing 1 MB of JSON takes a moment).
const Gpt2Tokenizer& gpt2() {
  static const std::shared_ptr<Gpt2Tokenizer> tok =
      Gpt2Tokenizer::from_files(kGpt2Dir / "encoder.json.gz", kGpt2Dir / "vocab.bpe.gz");
  return *tok;
}

const nlohmann::json& golden() {
  static const nlohmann::json j = [] {
    std::ifstream in(kGpt2Dir / "golden.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ft_tok_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST(Gpt2Tokenizer, LoadsTheGpt2Vocabulary) {
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().num_merges(), 50000u);
  EXPECT_EQ(gpt2().end_of_text(), 50256);
  EXPECT_EQ(gpt2().name(), "gpt2");
}

TEST(Gpt2Tokenizer, HelloWorld) {
  EXPECT_EQ(gpt2().encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  const int32_t ids[] = {15496, 995, 50256};
  EXPECT_EQ(gpt2().decode(ids, 3), "Hello world<|endoftext|>");
}

TEST(Gpt2Tokenizer, MatchesGoldenIdsBothWays) {
  const auto& cases = golden()["cases"];
  ASSERT_GE(cases.size(), 30u);
  int with_special = 0;
  for (const auto& c : cases) {
    const std::string name = c["name"];
    const std::string bytes = from_hex(c["hex"]);
    if (c.contains("text")) {
      EXPECT_EQ(bytes, c["text"].get<std::string>()) << name;
    }
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(gpt2().encode(bytes), ids) << name;
    EXPECT_EQ(gpt2().decode(ids.data(), ids.size()), bytes) << name;
    if (c.contains("ids_special")) {
      const auto ids_special = c["ids_special"].get<std::vector<int32_t>>();
      EXPECT_EQ(gpt2().encode_with_special(bytes), ids_special) << name;
      EXPECT_EQ(gpt2().decode(ids_special.data(), ids_special.size()), bytes) << name;
      if (ids_special != ids) ++with_special;
    }
  }
  EXPECT_EQ(with_special, 1) << "only the <|endoftext|> case differs with special tokens";
}

TEST(Gpt2Tokenizer, EndOfTextInTextIsOrdinaryCharacters) {
  const auto ids = gpt2().encode("<|endoftext|>");
  EXPECT_EQ(ids, (std::vector<int32_t>{27, 91, 437, 1659, 5239, 91, 29}));
  EXPECT_EQ(gpt2().encode_with_special("a<|endoftext|>"), (std::vector<int32_t>{64, 50256}));
}

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  gpt2_pretokenize(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

TEST(Gpt2Tokenizer, PretokenizerFollowsTheRegex) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello world's end"), (V{"Hello", " world", "'s", " end"}));
  EXPECT_EQ(pieces("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(pieces("a \n\nb"), (V{"a", " \n", "\n", "b"}));
  EXPECT_EQ(pieces("x   "), (V{"x", "   "}));
  EXPECT_EQ(pieces("x\t y"), (V{"x", "\t", " y"}));
  EXPECT_EQ(pieces("abc123 456!!?"), (V{"abc", "123", " 456", "!!?"}));
  EXPECT_EQ(pieces("don't'X 're"), (V{"don", "'t", "'", "X", " '", "re"}));
  EXPECT_EQ(pieces("\xC3\xA9t\xC3\xA9 \xD0\x9C\xD0\xB8"),
            (V{"\xC3\xA9t\xC3\xA9", " \xD0\x9C\xD0\xB8"}));
  EXPECT_EQ(pieces("\xFF\xFE a\x80"), (V{"\xFF\xFE", " a", "\x80"}));
  EXPECT_EQ(pieces(""), V{});
}

TEST(Gpt2Tokenizer, ByteToUnicodeTable) {
  EXPECT_EQ(gpt2_byte_to_unicode('!'), static_cast<uint32_t>('!'));
  EXPECT_EQ(gpt2_byte_to_unicode(' '), 0x120u);  // the 'G with dot' that marks a space
  EXPECT_EQ(gpt2_byte_to_unicode('\n'), 0x10Au);
  EXPECT_EQ(gpt2_byte_to_unicode(0), 0x100u);
  EXPECT_EQ(gpt2_byte_to_unicode(0xAD), 0x143u);
}

TEST(Gpt2Tokenizer, RandomBytesRoundTrip) {
  std::mt19937 rng(7);
  const std::string alphabet[] = {"a",
                                  "Z",
                                  " ",
                                  "  ",
                                  "\n",
                                  "'s",
                                  "1",
                                  "\xC3\xA9",
                                  "\xE4\xB8\xAD",
                                  "\xF0\x9F\xA6\x80",
                                  "\xFF",
                                  "\x80",
                                  "\xE2\x82",
                                  "!",
                                  "\t"};
  for (int trial = 0; trial < 300; ++trial) {
    std::string s;
    const int len = static_cast<int>(rng() % 40);
    for (int k = 0; k < len; ++k) {
      if (rng() % 4 == 0) {
        s.push_back(static_cast<char>(rng() & 0xff));
      } else {
        s += alphabet[rng() % std::size(alphabet)];
      }
    }
    const auto ids = gpt2().encode(s);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < 50256) << id;
    ASSERT_EQ(gpt2().decode(ids.data(), ids.size()), s) << "trial " << trial;
    std::string joined;
    gpt2_pretokenize(s, [&](std::string_view p) { joined += p; });
    ASSERT_EQ(joined, s);
  }
}

TEST(Gpt2Tokenizer, ThreadsAgreeWithEachOther) {
  const auto& cases = golden()["cases"];
  std::string all;
  for (const auto& c : cases) all += from_hex(c["hex"]);
  const auto expect = gpt2().encode(all);
  std::vector<std::vector<int32_t>> got(3);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep) got[static_cast<size_t>(t)] = gpt2().encode(all);
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, expect);
}

TEST(Gpt2Tokenizer, DecodeUnknownIdsAsReplacementCharacter) {
  const int32_t ids[] = {64, 50257, -3};
  EXPECT_EQ(gpt2().decode(ids, 3), "a\xEF\xBF\xBD\xEF\xBF\xBD");
}

// Writes a HuggingFace tokenizer.json from the committed GPT-2 files.
void write_tokenizer_json(const fs::path& out, bool pair_merges) {
  nlohmann::json j;
  j["version"] = "1.0";
  j["added_tokens"] =
      nlohmann::json::array({{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}});
  j["model"]["type"] = "BPE";
  j["model"]["vocab"] = nlohmann::json::parse(gunzip(kGpt2Dir / "encoder.json.gz"));
  j["model"]["vocab"].erase("<|endoftext|>");  // only in added_tokens, as some files have it
  auto merges = nlohmann::json::array();
  const std::string bpe = gunzip(kGpt2Dir / "vocab.bpe.gz");
  size_t pos = bpe.find('\n') + 1;  // skip "#version"
  while (pos < bpe.size()) {
    const size_t eol = bpe.find('\n', pos);
    const std::string line = bpe.substr(pos, eol - pos);
    pos = eol == std::string::npos ? bpe.size() : eol + 1;
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (pair_merges) {
      merges.push_back({line.substr(0, sp), line.substr(sp + 1)});
    } else {
      merges.push_back(line);
    }
  }
  j["model"]["merges"] = merges;
  write_file_atomic(out, j.dump());
}

class Gpt2Files : public TempDir {};

TEST_F(Gpt2Files, TokenizerJsonBothMergeFormsMatchEncoderJson) {
  for (bool pairs : {false, true}) {
    const fs::path p = dir_ / (pairs ? "pairs.json" : "strings.json");
    write_tokenizer_json(p, pairs);
    const auto tok = make_tokenizer("gpt2", p.string(), "");
    EXPECT_EQ(tok->vocab_size(), 50257);
    EXPECT_EQ(tok->name(), "gpt2");
    for (const auto& c : golden()["cases"]) {
      const std::string bytes = from_hex(c["hex"]);
      EXPECT_EQ(tok->encode(bytes), c["ids"].get<std::vector<int32_t>>()) << c["name"];
    }
    const auto& g = dynamic_cast<const Gpt2Tokenizer&>(*tok);
    EXPECT_EQ(g.end_of_text(), 50256);
  }
}

template <typename E>
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning " << needles[0];
  } catch (const E& e) {
    for (const auto& n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << " lacks " << n;
    }
  }
}

TEST_F(Gpt2Files, ClearErrorsForMissingAndMalformedFiles) {
  const std::string enc = (kGpt2Dir / "encoder.json.gz").string();
  const std::string bpe = (kGpt2Dir / "vocab.bpe.gz").string();
  expect_error<ConfigError>([&] { make_tokenizer("gpt2", (dir_ / "nope.json").string(), bpe); },
                            {"nope.json", "not found"});
  expect_error<ConfigError>([&] { make_tokenizer("gpt2", enc, (dir_ / "nope.bpe").string()); },
                            {"nope.bpe", "not found"});
  expect_error<ConfigError>([&] { make_tokenizer("gpt3", "", ""); }, {"gpt3", "byte or gpt2"});
  expect_error<ConfigError>([&] { make_tokenizer("gpt2", "", ""); }, {"tokenizer.json"});
  expect_error<ConfigError>([&] { make_tokenizer("byte", enc, ""); }, {"byte"});
  EXPECT_EQ(make_tokenizer("byte", "", "")->vocab_size(), 256);

  write_file_atomic(dir_ / "bad.json", "{\"a\": 1,\n \"b\": }");
  expect_error<FormatError>([&] { make_tokenizer("gpt2", (dir_ / "bad.json").string(), bpe); },
                            {"bad.json", "byte 16"});
  write_file_atomic(dir_ / "neg.json", "{\"a\": -1}");
  expect_error<FormatError>([&] { make_tokenizer("gpt2", (dir_ / "neg.json").string(), bpe); },
                            {"neg.json", "\"a\""});
  write_file_atomic(dir_ / "few.json", "{\"a\": 0, \"b\": 1}");
  expect_error<FormatError>([&] { make_tokenizer("gpt2", (dir_ / "few.json").string(), bpe); },
                            {"few.json", "no token for byte 0x00"});
  write_file_atomic(dir_ / "bad.bpe", "#version: 0.2\n\xC4\xA0 t\nthree parts here\n");
  expect_error<FormatError>([&] { make_tokenizer("gpt2", enc, (dir_ / "bad.bpe").string()); },
                            {"bad.bpe", "line 3", "three parts here"});
  write_file_atomic(dir_ / "unknown.bpe", "#version: 0.2\n\xC4\xA0 t\nqqqqqq zzzzzz\n");
  expect_error<FormatError>([&] { make_tokenizer("gpt2", enc, (dir_ / "unknown.bpe").string()); },
                            {"unknown.bpe", "merge 2", "not in the vocabulary"});
  write_file_atomic(dir_ / "model.json", "{\"model\": {\"type\": \"WordPiece\"}}");
  expect_error<FormatError>([&] { make_tokenizer("gpt2", (dir_ / "model.json").string(), ""); },
                            {"model.json", "WordPiece"});
  write_file_atomic(dir_ / "merge.json", "{\"model\": {\"vocab\": {}, \"merges\": [\"a b\", 3]}}");
  expect_error<FormatError>([&] { make_tokenizer("gpt2", (dir_ / "merge.json").string(), ""); },
                            {"merge.json", "model.merges[1]"});
  // A truncated gzip file.
  const std::string gz = read_file(kGpt2Dir / "vocab.bpe.gz");
  write_file_atomic(dir_ / "cut.bpe.gz", gz.substr(0, gz.size() / 2));
  expect_error<FormatError>([&] { make_tokenizer("gpt2", enc, (dir_ / "cut.bpe.gz").string()); },
                            {"cut.bpe.gz"});
}

TEST_F(Gpt2Files, PlainFilesLoadLikeGzipped) {
  write_file_atomic(dir_ / "encoder.json", gunzip(kGpt2Dir / "encoder.json.gz"));
  write_file_atomic(dir_ / "vocab.bpe", gunzip(kGpt2Dir / "vocab.bpe.gz"));
  const auto tok =
      make_tokenizer("gpt2", (dir_ / "encoder.json").string(), (dir_ / "vocab.bpe").string());
  EXPECT_EQ(tok->encode("Hello world"), (std::vector<int32_t>{15496, 995}));
}

}  // namespace
}  // namespace ft::trainer::data
