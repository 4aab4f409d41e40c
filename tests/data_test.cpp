// data_test.cpp: tokenizer, llm.c shards, token sources, BatchLoader, load_data and the KJV corpus.
#include "ft/trainer/data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"

namespace ft::trainer::data {
namespace {

namespace fs = std::filesystem;

class DataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ft_data_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::vector<int32_t> read_all(const TokenSource& s) {
    std::vector<int32_t> out(s.size());
    s.read(0, out.size(), out.data());
    return out;
  }
  void expect_shard_error(const std::string& bytes, const std::string& needle) {
    const fs::path p = dir_ / "bad_shard.bin";
    write_file_atomic(p, bytes);
    try {
      open_llmc_shard(p);
      ADD_FAILURE() << "no FormatError for " << needle;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad_shard.bin"), std::string::npos) << e.what();
    }
  }

  fs::path dir_;
};

std::vector<int32_t> iota_tokens(size_t n, int32_t mod) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 7 + 3) % mod);
  return v;
}

TEST(ByteTokenizerTest, Roundtrip) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_EQ(tok.name(), "byte");
  std::string text = "In the beginning\n\xC3\xA9\x01\xFF";
  text.push_back('\0');
  const std::vector<int32_t> ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], 'I');
  EXPECT_EQ(ids[ids.size() - 2], 255);
  for (int32_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 256);
  }
  EXPECT_EQ(tok.decode(ids.data(), ids.size()), text);
  const int32_t bad[] = {'a', 300, -1};
  EXPECT_EQ(tok.decode(bad, 3), "a\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_F(DataTest, ShardV1Roundtrip) {
  const std::vector<int32_t> toks = iota_tokens(1000, 65536);
  const fs::path p = dir_ / "v1.bin";
  write_llmc_shard(p, toks, 1);
  EXPECT_EQ(fs::file_size(p), 1024 + 2 * toks.size());
  auto s = open_llmc_shard(p);
  EXPECT_EQ(s->size(), toks.size());
  EXPECT_EQ(read_all(*s), toks);
  int32_t mid[5];
  s->read(500, 5, mid);
  EXPECT_EQ(std::vector<int32_t>(mid, mid + 5),
            std::vector<int32_t>(toks.begin() + 500, toks.begin() + 505));
  EXPECT_EQ(s->max_token(), *std::max_element(toks.begin(), toks.end()));
}

TEST_F(DataTest, ShardV7Roundtrip) {
  std::vector<int32_t> toks = iota_tokens(777, 200000);
  toks.push_back(150000);
  const fs::path p = dir_ / "v7.bin";
  write_llmc_shard(p, toks, 7);
  EXPECT_EQ(fs::file_size(p), 1024 + 4 * toks.size());
  auto s = open_llmc_shard(p);
  EXPECT_EQ(read_all(*s), toks);
  EXPECT_EQ(s->max_token(), *std::max_element(toks.begin(), toks.end()));
}

TEST_F(DataTest, ShardWriterRejectsOutOfRange) {
  EXPECT_THROW(write_llmc_shard(dir_ / "x.bin", {70000}, 1), ConfigError);
  EXPECT_THROW(write_llmc_shard(dir_ / "x.bin", {-1}, 7), ConfigError);
  EXPECT_THROW(write_llmc_shard(dir_ / "x.bin", {1}, 2), ConfigError);
  EXPECT_FALSE(fs::exists(dir_ / "x.bin"));
}

TEST_F(DataTest, ShardFormatErrors) {
  const fs::path p = dir_ / "good.bin";
  write_llmc_shard(p, iota_tokens(100, 50000), 1);
  const std::string good = read_file(p);

  std::string bad_magic = good;
  const int32_t m = 20240326;
  std::memcpy(bad_magic.data(), &m, 4);
  expect_shard_error(bad_magic, "bad magic");

  std::string bad_version = good;
  const int32_t v = 3;
  std::memcpy(bad_version.data() + 4, &v, 4);
  expect_shard_error(bad_version, "unsupported version 3");

  // Wrong size: the header claims more tokens than the file holds, and vice versa.
  expect_shard_error(good.substr(0, good.size() - 2), "expected 1224 bytes, actual 1222");
  expect_shard_error(good + "xx", "expected 1224 bytes, actual 1226");
  std::string wrong_count = good;
  const int32_t n = 101;
  std::memcpy(wrong_count.data() + 8, &n, 4);
  expect_shard_error(wrong_count, "size mismatch");

  // Truncated inside the header, and empty.
  expect_shard_error(good.substr(0, 500), "truncated");
  expect_shard_error("", "truncated");
}

TEST_F(DataTest, ConcatAndSliceSources) {
  auto a = make_vector_source({1, 2, 3});
  auto b = make_vector_source({});
  auto c = make_vector_source({4, 5, 9, 6});
  auto cat = make_concat_source({a, b, c});
  EXPECT_EQ(cat->size(), 7u);
  EXPECT_EQ(cat->max_token(), 9);
  EXPECT_EQ(read_all(*cat), (std::vector<int32_t>{1, 2, 3, 4, 5, 9, 6}));
  int32_t span[3];
  cat->read(2, 3, span);  // crosses the empty part
  EXPECT_EQ(std::vector<int32_t>(span, span + 3), (std::vector<int32_t>{3, 4, 5}));
  auto sl = make_slice_source(cat, 2, 4);
  EXPECT_EQ(read_all(*sl), (std::vector<int32_t>{3, 4, 5, 9}));
  EXPECT_THROW(make_slice_source(cat, 5, 3), ConfigError);
}

TEST_F(DataTest, BatchLoaderTargetsAreShiftedInputs) {
  const std::vector<int32_t> toks = iota_tokens(100, 97);
  BatchLoader loader(make_vector_source(toks), 2, 4);
  std::vector<int32_t> in(8), tgt(8);
  loader.next(in.data(), tgt.data());
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(in[i], toks[i]);
    EXPECT_EQ(tgt[i], toks[i + 1]);
  }
  EXPECT_EQ(loader.position(), 8u);
  loader.next(in.data(), tgt.data());
  EXPECT_EQ(in[0], toks[8]);
  EXPECT_EQ(tgt[7], toks[16]);
}

TEST_F(DataTest, BatchLoaderWrapsAtEnd) {
  // 25 tokens, B*T = 8: batches start at 0, 8, 16 (16+9 = 25 fits), then wrap.
  const std::vector<int32_t> toks = iota_tokens(25, 1000);
  BatchLoader loader(make_vector_source(toks), 2, 4);
  EXPECT_EQ(loader.batches_per_epoch(), 3u);
  std::vector<int32_t> in(8), tgt(8);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(loader.position(), 8u * i);
    EXPECT_EQ(loader.epoch(), 0u);
    loader.next(in.data(), tgt.data());
  }
  EXPECT_EQ(tgt[7], toks[24]);
  EXPECT_EQ(loader.position(), 0u);
  EXPECT_EQ(loader.epoch(), 1u);
  loader.next(in.data(), tgt.data());
  EXPECT_EQ(in[0], toks[0]);
}

TEST_F(DataTest, BatchLoaderPositionSaveRestore) {
  const std::vector<int32_t> toks = iota_tokens(1000, 251);
  auto src = make_vector_source(toks);
  BatchLoader a(src, 3, 5);
  std::vector<int32_t> in(15), tgt(15);
  for (int i = 0; i < 70; ++i) a.next(in.data(), tgt.data());  // past one wrap
  const uint64_t pos = a.position(), epoch = a.epoch();
  EXPECT_GE(epoch, 1u);
  std::vector<std::vector<int32_t>> expected;
  for (int i = 0; i < 80; ++i) {
    a.next(in.data(), tgt.data());
    expected.push_back(in);
    expected.push_back(tgt);
  }
  BatchLoader b(src, 3, 5);
  b.set_position(pos);
  b.set_epoch(epoch);
  for (int i = 0; i < 80; ++i) {
    b.next(in.data(), tgt.data());
    EXPECT_EQ(in, expected[2 * i]) << i;
    EXPECT_EQ(tgt, expected[2 * i + 1]) << i;
  }
  EXPECT_EQ(b.position(), a.position());
  EXPECT_EQ(b.epoch(), a.epoch());
}

TEST_F(DataTest, BatchLoaderValidates) {
  auto src = make_vector_source(iota_tokens(20, 10));
  EXPECT_THROW(BatchLoader(src, 4, 5), ConfigError);  // needs 21 tokens
  EXPECT_THROW(BatchLoader(src, 0, 5), ConfigError);
  BatchLoader ok(src, 1, 19);  // exactly B*T+1
  EXPECT_NO_THROW(ok.set_position(0));
  EXPECT_THROW(ok.set_position(1), ConfigError);
  EXPECT_THROW(ok.set_position(1000), ConfigError);
}

std::string make_text(int paragraphs) {
  std::string text;
  for (int p = 0; p < paragraphs; ++p) {
    text += "Chapter " + std::to_string(p) + " line one.\n";
    text += "And line two of chapter " + std::to_string(p) + ".\n";
    text += p % 3 == 0 ? "\n\n  \n" : "\n";  // runs of blank lines count as one break
  }
  return text;
}

TEST_F(DataTest, LoadTextSplitsEveryTwentiethParagraphToVal) {
  const fs::path p = dir_ / "book.txt";
  write_file_atomic(p, make_text(45));
  ByteTokenizer tok;
  const TrainValSplit a = load_data(p.string(), tok);
  const TrainValSplit b = load_data(p.string(), tok);
  ASSERT_GT(a.val->size(), 0u);
  EXPECT_EQ(read_all(*a.train), read_all(*b.train));  // deterministic
  EXPECT_EQ(read_all(*a.val), read_all(*b.val));
  const std::string val = tok.decode(read_all(*a.val).data(), a.val->size());
  EXPECT_EQ(val,
            "Chapter 19 line one.\nAnd line two of chapter 19.\n\n"
            "Chapter 39 line one.\nAnd line two of chapter 39.\n\n");
  const std::string train = tok.decode(read_all(*a.train).data(), a.train->size());
  EXPECT_EQ(train.rfind("Chapter 0 line one.\n", 0), 0u);
  EXPECT_EQ(train.find("Chapter 19 "), std::string::npos);
  EXPECT_NE(train.find("Chapter 44 "), std::string::npos);
  EXPECT_NE(a.description.find("book.txt (byte)"), std::string::npos) << a.description;
}

TEST_F(DataTest, LoadShortTextSplitsByPosition) {
  const fs::path p = dir_ / "short.txt";
  write_file_atomic(p, make_text(3));
  const TrainValSplit s = load_data(p.string(), ByteTokenizer());
  EXPECT_GT(s.val->size(), 0u);
  EXPECT_GT(s.train->size(), s.val->size());
}

TEST_F(DataTest, LoadSingleShardSplits95to5) {
  const std::vector<int32_t> toks = iota_tokens(2000, 50257);
  const fs::path p = dir_ / "one.bin";
  write_llmc_shard(p, toks, 1);
  const TrainValSplit s = load_data(p.string(), ByteTokenizer());
  EXPECT_EQ(s.train->size(), 1900u);
  EXPECT_EQ(s.val->size(), 100u);
  std::vector<int32_t> all = read_all(*s.train);
  const std::vector<int32_t> val = read_all(*s.val);
  all.insert(all.end(), val.begin(), val.end());
  EXPECT_EQ(all, toks);
}

TEST_F(DataTest, LoadShardDirectory) {
  const fs::path d = dir_ / "shards";
  fs::create_directories(d);
  write_llmc_shard(d / "fineweb_train_000002.bin", {20, 21, 22}, 1);
  write_llmc_shard(d / "fineweb_train_000001.bin", {10, 11}, 7);
  write_llmc_shard(d / "fineweb_val_000000.bin", {90, 91, 92, 93}, 1);
  write_file_atomic(d / "README.txt", "not a shard");
  const TrainValSplit s = load_data(d.string(), ByteTokenizer());
  EXPECT_EQ(read_all(*s.train), (std::vector<int32_t>{10, 11, 20, 21, 22}));
  EXPECT_EQ(read_all(*s.val), (std::vector<int32_t>{90, 91, 92, 93}));
  EXPECT_EQ(s.train->max_token(), 22);
  EXPECT_FALSE(s.description.empty());
}

TEST_F(DataTest, LoadMissingPathIsConfigError) {
  EXPECT_THROW(load_data((dir_ / "nope.txt").string(), ByteTokenizer()), ConfigError);
  EXPECT_THROW(load_data(dir_.string(), ByteTokenizer()), ConfigError);  // no shards
}

// Sets an environment variable for the scope of a test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST_F(DataTest, CacheDirPrecedence) {
  ScopedEnv xdg("XDG_CACHE_HOME", (dir_ / "xdg").string());
  {
    ScopedEnv ft("FT_CACHE_DIR", (dir_ / "ftc").string());
    EXPECT_EQ(cache_dir(), dir_ / "ftc");
    EXPECT_TRUE(fs::is_directory(dir_ / "ftc"));
  }
  ScopedEnv ft_empty("FT_CACHE_DIR", "");
  EXPECT_EQ(cache_dir(), dir_ / "xdg" / "ft");
}

bool have_bible() { return std::system("command -v bible >/dev/null 2>&1") == 0; }

TEST_F(DataTest, KjvCorpus) {
  // scripts/test.sh installs bible-kjv; without it the default corpus is missing.
  ASSERT_TRUE(have_bible()) << "`bible` (Debian package bible-kjv) is not installed; run scripts/deps.sh";
  ScopedEnv env("FT_CACHE_DIR", (dir_ / "cache").string());
  const fs::path p = kjv_text_path();
  EXPECT_EQ(p, dir_ / "cache" / "kjv.txt");
  EXPECT_GT(fs::file_size(p), 4'000'000u);
  const std::string text = read_file(p);
  EXPECT_EQ(text.rfind("In the beginning God created the heaven and the earth.\n", 0), 0u);
  // Genesis 1 ends, a blank line, then Genesis 2 begins; no references remain.
  EXPECT_NE(text.find("the sixth day.\n\nThus the heavens"), std::string::npos);
  EXPECT_EQ(text.find("Ge1:"), std::string::npos);
  EXPECT_EQ(text.find("Rev22:"), std::string::npos);
  EXPECT_EQ(text.substr(text.size() - 23), "be with you all. Amen.\n");
  // Second call uses the cache.
  EXPECT_EQ(kjv_text_path(), p);
  const TrainValSplit s = load_data("kjv", ByteTokenizer());
  EXPECT_GT(s.train->size(), 3'500'000u);
  EXPECT_GT(s.val->size(), 100'000u);
  EXPECT_EQ(s.description.rfind("kjv (byte): ", 0), 0u) << s.description;
}

TEST_F(DataTest, KjvWithoutBibleNamesPackage) {
  ScopedEnv env("FT_CACHE_DIR", (dir_ / "cache2").string());
  ScopedEnv path("PATH", (dir_ / "empty_bin").string());
  try {
    kjv_text_path();
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("bible-kjv"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ft::trainer::data
